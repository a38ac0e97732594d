/**
 * Whether `promise` resolves within `ms`: true when it does, false when the time runs out first; its rejection
 * within the time is passed on. The timer is cleared either way, so a bounded wait leaves nothing pending; `unref`
 * lets the process exit while it runs (a shutdown's bound). The one promise-against-timer race of the project.
 */
export async function within(
  promise: Promise<unknown>,
  ms: number,
  options: { unref?: boolean } = {},
): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    if (options.unref === true) timer.unref();
  });
  try {
    return await Promise.race([promise.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
