// Placeholder until the command is built; it fails loudly rather than pretending to work.
export function run(_argv: string[]): Promise<number> {
  process.stderr.write("sbinbox broker: not built yet\n");
  return Promise.resolve(1);
}
