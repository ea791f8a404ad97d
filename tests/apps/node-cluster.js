// node's cluster module under smcrun, as over TCP. In its default round-robin mode
// the primary process accepts every connection and passes it to a worker over the
// IPC channel (a unix socket, SCM_RIGHTS); the worker serves it. Before libsmcrun
// took over connections passed that way, the worker got the bare socket pair end of
// the SMC connection: nothing it wrote arrived, the client hung.
//  1. 2 workers; 40 sequential connections from the primary: write 64 KiB + 7, end,
//     the echo and EOF, each checked.
//  2. 100 at once, 64 KiB + 7 each way, checked.
//  3. both workers served connections (the primary spreads them round-robin; with
//     SCHED_NONE the workers share the listener's queue).
// With the argument "none" (cluster.SCHED_NONE) the primary passes its listening
// socket to each worker instead, and they accept themselves: the primary passes a
// bound socket that each worker then listens on. Under smcrun the first worker's
// listen() registers it with smcd, which keeps its accept channel for 3 s, and the
// others' join it (before, each registered it again, and the newest registration got
// every SMC connection: served 140/0).
// Prints one line; exit status 0 only if every case held.
'use strict';
const cluster = require('cluster');
const net = require('net');
const crypto = require('crypto');

const WORKERS = 2;

function echoOnce(port, data) {
  return new Promise((resolve) => {
    const got = [];
    const c = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => c.end(data));
    c.setTimeout(20000, () => { c.destroy(); resolve('timeout'); });
    c.on('data', (d) => got.push(d));
    c.on('error', (e) => resolve('error ' + e.code));
    c.on('close', () => resolve(Buffer.concat(got).equals(data) ? 'ok' : 'bad echo'));
  });
}

async function primary() {
  const none = process.argv[2] === 'none';
  cluster.schedulingPolicy = none ? cluster.SCHED_NONE : cluster.SCHED_RR;
  const served = new Map();
  const failed = [];
  let port = 0;
  const listening = [];
  for (let i = 0; i < WORKERS; i++) {
    const w = cluster.fork();
    served.set(w.id, 0);
    w.on('message', (m) => { if (m === 'served') served.set(w.id, served.get(w.id) + 1); });
    listening.push(new Promise((resolve) => w.once('listening', (a) => { port = a.port; resolve(); })));
  }
  await Promise.all(listening);
  const data = crypto.randomBytes(65536 + 7);
  let seq = 0;
  for (let i = 0; i < 40; i++) if ((await echoOnce(port, data)) === 'ok') seq++;
  if (seq !== 40) failed.push('sequential ' + seq + '/40');
  const res = await Promise.all(Array.from({ length: 100 }, () => echoOnce(port, data)));
  const conc = res.filter((r) => r === 'ok').length;
  if (conc !== 100) failed.push('concurrent ' + conc + '/100 (' + [...new Set(res)].join(',') + ')');
  await new Promise((r) => setTimeout(r, 200)); // the last 'served' messages
  const counts = [...served.values()];
  if (counts.some((n) => n === 0)) failed.push('served by one worker only: ' + counts.join('/'));
  for (const w of Object.values(cluster.workers)) w.kill();
  console.log('node cluster (' + (none ? 'SCHED_NONE' : 'SCHED_RR') + '): ' + (seq + conc) + ' echoes checked, served ' + counts.join('/') +
              ', failed: ' + (failed.join('; ') || 'none'));
  process.exitCode = failed.length ? 1 : 0;
}

function worker() {
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('data', (d) => s.write(d));
    s.on('end', () => { s.end(); process.send('served'); });
    s.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
}

if (cluster.isPrimary) primary(); else worker();
