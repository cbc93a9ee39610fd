// A session's live stream (text/event-stream), read with fetch() rather than
// EventSource so that it carries the bearer token in a header like every other call
// (EventSource cannot send headers; a token in a URL ends up in logs). A dropped or
// silent connection is reopened with Last-Event-ID: the last log line read.
import { setLive, sleep } from "./dom.js";
import { Unauthorized, api, messageOf } from "./api.js";

const SILENT_MS = 60_000;          // a stream with no byte (not even a keep-alive) this long
                                   // is reconnected (the API sends one every 15 s)

// Feed it the stream's text chunk by chunk: it calls onEvent(type, id, data) for each
// whole event and onRetry(ms) for a `retry:` field.
function eventParser(onEvent, onRetry) {
  let buf = "";
  let ev = { event: "message", data: [], id: null };
  return (chunk) => {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (ev.data.length) onEvent(ev.event, ev.id, ev.data.join("\n"));
        ev = { event: "message", data: [], id: null };
      } else if (!line.startsWith(":")) {
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") ev.event = val;
        else if (field === "data") ev.data.push(val);
        else if (field === "id") ev.id = val;
        else if (field === "retry" && /^\d+$/.test(val)) onRetry(Number(val));
      }
    }
  };
}

// Follows `url` until `signal` aborts or ended() says the session is over.
// lastId(): the Last-Event-ID to resume from (null: from the start); onEvent(type, id,
// data): each event, at once; caughtUp(): after a stream ends (it ends after the session
// does: read the state once more to know); closed(): once, when it stops following.
export async function follow(url, { signal, lastId, ended, onEvent, caughtUp, closed }) {
  let retryMs = 2000;
  while (!signal.aborted && !ended()) {
    // A connection that stays silent past a few keep-alives is dead: drop it.
    const conn = new AbortController();
    const stop = () => conn.abort();
    signal.addEventListener("abort", stop);
    let quiet = setTimeout(stop, SILENT_MS);
    try {
      const headers = { Accept: "text/event-stream" };
      const id = lastId();
      if (id !== null) headers["Last-Event-ID"] = String(id);
      const r = await api(url, { headers, signal: conn.signal });
      if (!r.ok) throw new Error(await messageOf(r));
      setLive("live");
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      const feed = eventParser(onEvent, (ms) => { retryMs = ms; });
      for (;;) {
        const { value, done } = await reader.read();
        clearTimeout(quiet);
        if (done) break;
        quiet = setTimeout(stop, SILENT_MS);
        feed(value);
      }
      await caughtUp();
    } catch (err) {
      if (signal.aborted || err instanceof Unauthorized) return;
      setLive(`reconnecting: ${err.message || err}`);
    } finally {
      clearTimeout(quiet);
      signal.removeEventListener("abort", stop);
    }
    if (ended()) break;
    await sleep(retryMs, signal);
  }
  closed();
}
