// bench_express.js - the peer of make bench-http: Express 5 with
// express-idempotency (its in-memory adapter), what a Node user would
// pick. POST /agent/execute answers the same JSON as the gateway; with
// UPSTREAM set, the handler first makes the same upstream call as the
// gateway's url tool does.
//
//   node bench_express.js PORT [UPSTREAM_URL]
const express = require('express');
const idempotency = require('express-idempotency');

const port = Number(process.argv[2]);
const upstream = process.argv[3];
const app = express();
app.use(express.json());
app.use(idempotency.idempotency());

app.post('/agent/execute', async (req, res) => {
  if (idempotency.getSharedIdempotencyService().isHit(req)) {
    return;
  }
  let data = { order_id: 1 };
  if (upstream) {
    const r = await fetch(upstream, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json',
                 'Idempotency-Key': req.get('Idempotency-Key') },
      body: JSON.stringify(req.body.arguments || {}),
    });
    data = await r.json();
  }
  res.set('Cache-Control', 'no-store');
  res.json({ execution_id: 'exec_' + req.get('Idempotency-Key'),
             status: 'completed', data });
});

const server = app.listen(port, '127.0.0.1', () => {
  console.log('ready ' + server.address().port);
});
