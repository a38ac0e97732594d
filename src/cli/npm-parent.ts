/**
 * Calls `gone` once when the process that started this one has exited, if npm started it (`npx sbinbox worker`,
 * `npm start`). npm runs a bin or a script through `sh -c`, and passes a SIGTERM sent to npm alone (a supervisor's
 * stop, `kill <npm's pid>`) to that shell only; the shell dies of it without passing it on, and npm exits, so the
 * command would run on as an orphan (ppid 1), still receiving. Seen with npm 11.19 on Node 24 (@npmcli/run-script's
 * signal-manager.js forwards to the shell it spawned). A signal to the whole group (a Ctrl-C in a terminal) reaches
 * the command itself; `gone` may then come while it stops, and is no second signal.
 *
 * Only under npm (its `npm_command` variable): a command started some other way may be meant to outlive its parent
 * (`nohup sbinbox worker &`, then the shell exits). `process.ppid` is read once at start-up, so the parent is
 * watched by its pid: a signal 0 that finds no such process (a parent that exited was reaped by npm).
 */
export function whenNpmParentGone(gone: () => void, intervalMs = 500): () => void {
  const parent = process.ppid;
  if (process.env.npm_command === undefined || parent <= 1) return () => undefined;
  const timer = setInterval(() => {
    if (alive(parent)) return;
    clearInterval(timer);
    gone();
  }, intervalMs).unref();
  return () => clearInterval(timer);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
