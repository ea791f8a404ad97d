// node (libuv) under smcrun, as over TCP. libuv closes every descriptor with
// syscall(SYS_close, fd), past close(2): before libsmcrun defined syscall(), each
// closed connection's number stayed an SMC connection in the library, and whatever
// node opened next on it (a socket, a file) was misrouted: the 2nd sequential
// connection hung, files got EPIPE, server.close() left SMC connects queued.
//  1. 20 sequential connections: connect, write, end, the echo and EOF, close.
//  2. 100 at once, 64 KiB + 7 each way, checked.
//  3. fs after all those closes: a file written and read back on reused numbers.
//  4. server.close(): a connect afterwards is refused (ECONNREFUSED).
// Prints one line; exit status 0 only if every case held.
'use strict';
const net = require('net');
const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');

function echoOnce(port, data) {
  return new Promise((resolve) => {
    const got = [];
    const c = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => c.end(data));
    c.on('data', (d) => got.push(d));
    c.on('error', (e) => resolve('error ' + e.code));
    c.on('close', () => resolve(Buffer.concat(got).equals(data) ? 'ok' : 'bad echo'));
  });
}

function connectRefused(port) {
  return new Promise((resolve) => {
    const c = net.connect({ port, host: '127.0.0.1' }, () => { c.destroy(); resolve(false); });
    c.on('error', (e) => resolve(e.code === 'ECONNREFUSED'));
  });
}

async function main() {
  const failed = [];
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('data', (d) => s.write(d));
    s.on('end', () => s.end());
    s.on('error', () => {});
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;

  for (let i = 0; i < 20; i++) {
    const r = await echoOnce(port, Buffer.from('sequential ' + i));
    if (r !== 'ok') { failed.push('sequential #' + i + ': ' + r); break; }
  }
  const all = await Promise.all(Array.from({ length: 100 }, () => echoOnce(port, crypto.randomBytes(65536 + 7))));
  const bad = all.filter((r) => r !== 'ok');
  if (bad.length) failed.push('concurrent: ' + bad.length + ' of 100: ' + bad[0]);

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'node-echo-'));
  try {
    for (let i = 0; i < 10; i++) {
      const f = path.join(dir, 'f' + i);
      fs.writeFileSync(f, 'file ' + i);
      if (fs.readFileSync(f, 'utf8') !== 'file ' + i) { failed.push('fs #' + i); break; }
    }
  } catch (e) {
    failed.push('fs: ' + e.code);
  }
  fs.rmSync(dir, { recursive: true, force: true });

  await new Promise((r) => server.close(r));
  if (!(await connectRefused(port))) failed.push('connect after server.close() not refused');

  console.log('node echo: 20 sequential, 100 concurrent, fs, server.close: failed: ' + (failed.join('; ') || 'none'));
  process.exit(failed.length ? 1 : 0);
}

main();
