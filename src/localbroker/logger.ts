/** The broker logs through this; tests pass the quiet one, the CLI a console one. */
export interface BrokerLogger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
}

export const quietLogger: BrokerLogger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
};

export function consoleLogger(verbose = false): BrokerLogger {
  const write = (level: string, message: string): void => {
    process.stderr.write(`${new Date().toISOString()} broker ${level} ${message}\n`);
  };
  return {
    debug: (m) => {
      if (verbose) write("debug", m);
    },
    info: (m) => write("info", m),
    warn: (m) => write("warn", m),
  };
}
