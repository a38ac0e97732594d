import net from "node:net";
import { createRequire } from "node:module";

// tedious's own PRELOGIN encoder, so the answer is what tedious expects to parse.
const PreloginPayload = createRequire(import.meta.url)("tedious/lib/prelogin-payload.js") as new (options: {
  encrypt: boolean;
  version: { major: number; minor: number; build: number; subbuild: number };
}) => { data: Buffer };

const PRELOGIN = 0x12;
const LOGIN7 = 0x10;
const TABULAR_RESULT = 0x04;

export interface FakeTdsServer {
  readonly port: number;
  /** LOGIN7 packets answered so far (tedious retries a transient login error on the same connection). */
  readonly logins: number;
  close(): Promise<void>;
}

/**
 * A TDS server on 127.0.0.1 that does one thing: answers PRELOGIN without encryption, then every LOGIN7 with
 * one ERROR token carrying `errorNumber` and a DONE, as SQL Server or Azure SQL does for a refused login or a
 * database that is not available (40613 during a failover). For testing how a real tedious/mssql reports it.
 */
export async function startFakeTds(errorNumber: number, message: string): Promise<FakeTdsServer> {
  let logins = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => undefined);
    let buffer = Buffer.alloc(0);
    socket.on("data", (data) => {
      buffer = Buffer.concat([buffer, data]);
      while (buffer.length >= 8 && buffer.length >= buffer.readUInt16BE(2)) {
        const type = buffer[0];
        buffer = buffer.subarray(buffer.readUInt16BE(2));
        if (type === PRELOGIN) {
          const payload = new PreloginPayload({
            encrypt: false,
            version: { major: 16, minor: 0, build: 0, subbuild: 0 },
          });
          socket.write(packet(payload.data));
        } else if (type === LOGIN7) {
          logins += 1;
          socket.write(packet(Buffer.concat([errorToken(errorNumber, message), doneToken()])));
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    get logins() {
      return logins;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

function packet(payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header.writeUInt8(TABULAR_RESULT, 0);
  header.writeUInt8(1, 1); // end of message
  header.writeUInt16BE(8 + payload.length, 2);
  header.writeUInt8(1, 6); // packet id
  return Buffer.concat([header, payload]);
}

function usVarChar(text: string): Buffer {
  const length = Buffer.alloc(2);
  length.writeUInt16LE(text.length);
  return Buffer.concat([length, Buffer.from(text, "ucs2")]);
}

function bVarChar(text: string): Buffer {
  return Buffer.concat([Buffer.from([text.length]), Buffer.from(text, "ucs2")]);
}

function errorToken(errorNumber: number, message: string): Buffer {
  const fixed = Buffer.alloc(6);
  fixed.writeInt32LE(errorNumber, 0);
  fixed.writeUInt8(1, 4); // state
  fixed.writeUInt8(14, 5); // class
  const body = Buffer.concat([fixed, usVarChar(message), bVarChar("fake"), bVarChar(""), Buffer.alloc(4)]);
  const header = Buffer.alloc(3);
  header.writeUInt8(0xaa, 0);
  header.writeUInt16LE(body.length, 1);
  return Buffer.concat([header, body]);
}

function doneToken(): Buffer {
  const done = Buffer.alloc(13);
  done.writeUInt8(0xfd, 0);
  done.writeUInt16LE(0x02, 1); // DONE_ERROR
  return done;
}
