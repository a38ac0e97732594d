/** A progress bar on a terminal; plain lines at every tenth otherwise (CI logs, pipes). */
export interface Progress {
  update(done: number, note?: string): void;
  /** The last line; `done` (default the total) is what was really done, so a short run does not say total/total. */
  finish(note?: string, done?: number): void;
}

export function createProgress(
  label: string,
  total: number,
  stream: NodeJS.WriteStream = process.stderr,
): Progress {
  const tty = stream.isTTY === true;
  let lastTenth = -1;
  let last = "";
  const render = (done: number, note = ""): string => {
    const width = 30;
    const fraction = total > 0 ? Math.min(1, done / total) : 1;
    const filled = Math.round(fraction * width);
    return `${label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${total}${note ? ` ${note}` : ""}`;
  };
  return {
    update(done, note) {
      if (tty) {
        const line = render(done, note);
        if (line !== last) stream.write(`\r${line}\x1b[K`);
        last = line;
        return;
      }
      const tenth = total > 0 ? Math.floor((done / total) * 10) : 10;
      if (tenth > lastTenth) {
        lastTenth = tenth;
        stream.write(`${label}: ${done}/${total}${note ? ` ${note}` : ""}\n`);
      }
    },
    finish(note, done = total) {
      if (tty) stream.write(`\r${render(done, note)}\x1b[K\n`);
      else stream.write(`${label}: done ${done}/${total}${note ? ` ${note}` : ""}\n`);
    },
  };
}
