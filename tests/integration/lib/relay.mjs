// A loopback HTTP relay between warmslot and a llama-server, for conditions a real llama-server
// cannot be made to show at will: a backend that does not answer yet, a save whose answer never
// comes back, a restore that hangs.
import http from 'node:http';

// Forwards every request to `target()` unchanged, except:
// - while `hold` is set, every request waits (unanswered, unforwarded) until release() forwards
//   them all and clears `hold` (`held` counts them, `heldPaths` names them);
// - save calls while `holdSaveAnswers` is set: llama-server gets them (and writes the file),
//   the caller gets no answer (`saveAnswersHeld` counts those whose answer llama-server sent);
// - restore calls while `holdRestores` is set: never forwarded nor answered;
// - save calls while `delaySaves` is set: the caller gets no answer, and llama-server gets the
//   call only at release(), whether or not the caller is still there (a save that llama-server
//   finishes after its caller gave up on it); `delayedSaves` counts them;
// - requests whose path matches `holdOnly` (a RegExp) wait as above, the others pass;
// - the first request whose path matches `holdFrom` (a RegExp) sets `hold`: it and every request
//   after it wait as above;
// - requests whose path matches `failPaths` (a RegExp): the connection is closed unanswered, as
//   by a backend that dies on them; with `closeConnections` every answer ends its connection,
//   so the caller never meets that close on a kept-alive (pooled) one.
// Held answers end when the caller closes its connection, or at stop().
export function startRelay(target, { hold = false } = {}) {
  const held = new Set();
  const waiting = [];
  const late = [];  // delayed saves, sent to llama-server at release()
  const relay = { hold, held: 0, heldPaths: [], holdRestores: false, restoresHeld: 0,
    holdSaveAnswers: false, saveAnswersHeld: 0, delaySaves: false, delayedSaves: 0, failPaths: null, failed: 0,
    closeConnections: false, holdFrom: null, holdOnly: null, arrivals: [] };
  // An end on one side ends the other, as a direct connection would: a backend that dies in
  // the middle of an answer cuts the answer, and a caller that leaves cancels the backend's work.
  const forward = (req, res) => {
    const up = http.request(`${target()}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, relay.closeConnections ? { ...r.headers, connection: 'close' } : r.headers);
      r.pipe(res);
      r.on('error', () => res.destroy());
      r.on('close', () => { if (!r.complete) res.destroy(); });
    });
    up.on('error', () => res.destroy());
    res.on('close', () => { if (!res.writableFinished) up.destroy(); });
    req.pipe(up);
  };
  const server = http.createServer((req, res) => {
    relay.arrivals.push(`${req.method} ${req.url}`);  // every request, in the order it came
    if (relay.holdFrom?.test(req.url)) {
      relay.holdFrom = null;
      relay.hold = true;
    }
    if (relay.hold || relay.holdOnly?.test(req.url)) {
      relay.held++;
      relay.heldPaths.push(`${req.method} ${req.url}`);
      req.pause();
      waiting.push([req, res]);
      return;
    }
    if (relay.failPaths?.test(req.url)) {
      relay.failed++;
      req.socket.destroy();
      return;
    }
    if (relay.holdSaveAnswers && /[?&]action=save/.test(req.url)) {
      held.add(res);
      res.on('close', () => held.delete(res));
      const up = http.request(`${target()}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
        r.resume();
        r.on('end', () => { relay.saveAnswersHeld++; });
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
      return;
    }
    if (relay.delaySaves && /[?&]action=save/.test(req.url)) {
      relay.delayedSaves++;
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => late.push({ url: req.url, method: req.method, headers: req.headers, body: Buffer.concat(chunks) }));
      held.add(res);
      res.on('close', () => held.delete(res));
      return;
    }
    if (relay.holdRestores && /[?&]action=restore/.test(req.url)) {
      relay.restoresHeld++;
      held.add(res);
      req.resume();
      res.on('close', () => held.delete(res));
      return;
    }
    forward(req, res);
  });
  relay.release = () => {
    relay.hold = false;
    relay.holdOnly = null;
    for (const [req, res] of waiting.splice(0)) {
      if (!res.destroyed) forward(req, res);
    }
    relay.delaySaves = false;
    return Promise.all(late.splice(0).map((c) => new Promise((done) => {
      const up = http.request(`${target()}${c.url}`, { method: c.method, headers: c.headers }, (r) => {
        r.resume();
        r.on('end', done);
      });
      up.on('error', done);
      up.end(c.body);
    })));
  };
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    relay.url = `http://127.0.0.1:${server.address().port}`;
    relay.stop = () => new Promise((done) => {
      for (const r of held) r.destroy();
      for (const [, res] of waiting.splice(0)) res.destroy();
      server.closeAllConnections();
      server.close(() => done());
    });
    resolve(relay);
  }));
}
