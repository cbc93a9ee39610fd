// The HTTP API, called with the bearer credential (a person's key or the API token) the
// person typed or brought in a sign-in link (kept in this tab's session storage). A 401 hands over to the sign-in page (see
// onUnauthorized). Whatever changes something goes as JSON, `{}` when there is nothing
// to say: the API takes nothing else.
import { setLive } from "./dom.js";

export const TOKEN_KEY = "hitlflow.api_token";
export const TERMINAL = new Set(["succeeded", "failed", "canceled"]);

export class Unauthorized extends Error {}

// Set by inbox.js (the router): shows the sign-in page with the API's reason. A hook,
// not an import, so that the views need not import the router that imports them.
let showLogin = () => {};
export function onUnauthorized(fn) { showLogin = fn; }

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// Who the API takes this tab for (GET /api/whoami), or null; never the sign-in page.
export async function whoami(signal) {
  const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
  try {
    const r = await fetch("api/whoami", { headers, signal, cache: "no-store" });
    return r.ok ? await r.json() : null;
  } catch {
    return null;
  }
}

export async function api(path, { method = "GET", body, headers = {}, signal } = {}) {
  const all = { ...headers };
  if (token()) all.Authorization = `Bearer ${token()}`;
  const reads = method === "GET" || method === "HEAD";
  if (!reads) all["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method, headers: all, signal, cache: "no-store",
    body: reads ? undefined : JSON.stringify(body === undefined ? {} : body),
  });
  if (r.status === 401) {
    const why = await messageOf(r);
    if (!(signal && signal.aborted)) showLogin(why); // once: the login aborts the rest
    throw new Unauthorized();
  }
  return r;
}

// The API's error body ({code, message, rule?}); one of its own for an answer not JSON.
export async function errorOf(r) {
  try {
    const body = await r.json();
    if (body.error && typeof body.error.message === "string") return body.error;
    return { code: `http_${r.status}`, message: JSON.stringify(body) };
  } catch {
    return { code: `http_${r.status}`, message: `HTTP ${r.status}` };
  }
}

export async function messageOf(r) {
  try {
    const body = await r.json();
    return body.error ? body.error.message : JSON.stringify(body);
  } catch {
    return `HTTP ${r.status}`;
  }
}

export async function getJson(path, signal) {
  const r = await api(path, { signal });
  if (!r.ok) throw new Error(await messageOf(r));
  return r.json();
}

export function failed(err) {
  if (err instanceof Unauthorized || (err && err.name === "AbortError")) return;
  setLive(`error: ${err.message || err}`);
}
