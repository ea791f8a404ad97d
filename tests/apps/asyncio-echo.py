import asyncio
async def handle(r, w):
    while True:
        d = await r.read(65536)
        if not d: break
        w.write(d); await w.drain()
    w.close()
async def client(port, i):
    r, w = await asyncio.open_connection('127.0.0.1', port)
    msg = (b'%d' % i) * 10000
    w.write(msg); await w.drain()
    got = b''
    while len(got) < len(msg):
        got += await r.read(65536)
    w.close()
    return got == msg
async def main():
    srv = await asyncio.start_server(handle, '127.0.0.1', 0)
    port = srv.sockets[0].getsockname()[1]
    res = await asyncio.gather(*[client(port, i) for i in range(5)])
    print(res)
asyncio.run(main())
