// A listening server handed to child processes with node's child.send('server',
// server) (libuv passes the listening socket over the IPC channel: SCM_RIGHTS), under
// smcrun as over TCP. The primary listens, forks 3 children, sends each the server and
// closes its own copy; 200 clients, 20 at a time, each send "m<id>" and must read
// "w<child>:m<id>" and EOF. Every child must serve some (the children share one
// accept queue). Under smcrun the received listener arrived blocking, and libuv, which
// never sets O_NONBLOCK on a handle it receives, blocked in accept with connections
// waiting: 1-12 of 200 clients timed out; and with the listener registered again by
// each child the last child got all SMC connections.
// Prints one line; exit status 0 only if every case held.
'use strict';
const net = require('net');
const cp = require('child_process');

const NCHILD = 3, N = 200, PARALLEL = 20;

if (process.argv[2] === 'child') {
  process.on('message', (m, server) => {
    if (m !== 'server') return;
    server.on('connection', (s) => {
      s.on('data', (d) => s.end('w' + process.argv[3] + ':' + d));
      s.on('error', () => {});
    });
    process.send('ready');
  });
  process.on('disconnect', () => process.exit(0));
  return;
}

const timer = setTimeout(() => { console.log('node-send-server: no result in 60 s'); process.exit(1); }, 60000);
const server = net.createServer().listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  const kids = [];
  let ready = 0;
  for (let i = 0; i < NCHILD; i++) {
    const c = cp.fork(__filename, ['child', String(i)]);
    kids.push(c);
    c.on('message', () => { if (++ready === NCHILD) { server.close(); run(port); } });
    c.send('server', server);
  }
  function run(port) {
    let done = 0, ok = 0, next = 0;
    const by = {}, bad = [];
    function one() {
      if (next >= N) return;
      const id = next++;
      const s = net.connect(port, '127.0.0.1');
      let buf = '';
      const t = setTimeout(() => { s.destroy(); fin(id, 'timeout'); }, 10000);
      s.on('connect', () => s.write('m' + id));
      s.on('data', (d) => { buf += d; });
      s.on('end', () => {
        clearTimeout(t);
        const w = buf.split(':')[0];
        by[w] = (by[w] || 0) + 1;
        fin(id, /^w[0-9]+:m[0-9]+$/.test(buf) && buf.endsWith(':m' + id) ? null : 'read ' + JSON.stringify(buf));
      });
      s.on('error', (e) => { clearTimeout(t); fin(id, e.code || String(e)); });
    }
    function fin(id, err) {
      if (err) bad.push('m' + id + ': ' + err); else ok++;
      if (++done < N) { one(); return; }
      kids.forEach((k) => k.disconnect());
      clearTimeout(timer);
      const served = Object.keys(by).length;
      if (bad.length || served < NCHILD) {
        console.log('node-send-server: ' + ok + ' of ' + N + ' ok (' + bad.slice(0, 3).join('; ') + '), served by ' +
                    JSON.stringify(by) + ', want all ' + NCHILD + ' children');
        process.exitCode = 1;
      } else {
        console.log('node-send-server: ' + N + ' clients served by the ' + NCHILD + ' children that received the ' +
                    'server ' + JSON.stringify(by));
      }
    }
    for (let i = 0; i < PARALLEL; i++) one();
  }
});
