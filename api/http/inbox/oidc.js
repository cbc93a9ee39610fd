// Sign-in with an OpenID Connect provider (the API's auth mode `oidc`): the
// authorization-code flow with PKCE (S256, RFC 7636).
//
// 1. offerOidc(): when GET /api/auth/config has an `oidc` part, the sign-in page gets a
//    button for it. It makes a code verifier and a state (WebCrypto), keeps them in this
//    tab's session storage and sends the browser to the provider's authorization endpoint
//    with the verifier's SHA-256 challenge.
// 2. The provider sends the browser back to the inbox with ?code=...&state=...;
//    finishOidcSignIn() takes them out of the address bar at once, checks the state
//    against the one it kept, and sends code, verifier and redirect URI to the API
//    (POST /api/auth/oidc/token), which trades them at the provider's token endpoint (the
//    inbox may only call its own origin) and answers with the verified ID token.
// 3. That token is kept like a typed API token (session storage, this tab only) and sent
//    as `Authorization: Bearer`; never in a query string.
import { TOKEN_KEY, messageOf } from "./api.js";
import { h } from "./dom.js";

const PENDING_KEY = "hitlflow.oidc_pending";
const TOKEN_PATH = "/api/auth/oidc/token";

function b64url(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString(bytes) {
  return b64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

async function s256(text) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return b64url(new Uint8Array(digest));
}

// The `oidc` part of the API's open auth config, or null (another mode, or no answer).
export async function oidcConfig() {
  try {
    const r = await fetch("/api/auth/config", { cache: "no-store" });
    if (!r.ok) return null;
    const config = (await r.json()).oidc;
    return config && config.authorization_endpoint && config.client_id ? config : null;
  } catch {
    return null;
  }
}

// Sends the browser to the provider; it comes back to this page (finishOidcSignIn).
export async function startOidcSignIn(config) {
  if (!window.isSecureContext || !crypto.subtle) {
    throw new Error("signing in needs https (or this machine's own address)");
  }
  const verifier = randomString(48); // 64 characters
  const state = randomString(24);
  const redirectUri = config.redirect_url || location.origin + location.pathname;
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({
    state, verifier, redirect_uri: redirectUri, back: location.hash }));
  const url = new URL(config.authorization_endpoint);
  for (const [name, value] of Object.entries({
    response_type: "code", client_id: config.client_id, redirect_uri: redirectUri,
    scope: config.scopes || "openid", state,
    code_challenge: await s256(verifier), code_challenge_method: "S256",
  })) url.searchParams.set(name, value);
  location.assign(url.toString());
}

// On the way back from the provider: trade the code for a token. Resolves to whether
// this page load was such a return; rejects with what went wrong (shown on the sign-in
// page). Nothing of the answer stays in the address bar or the history.
export async function finishOidcSignIn() {
  const params = new URLSearchParams(location.search);
  if (!params.has("state") || !(params.has("code") || params.has("error"))) return false;
  let pending = null;
  try {
    pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) || "null");
  } catch {
    pending = null;
  }
  sessionStorage.removeItem(PENDING_KEY);
  history.replaceState(null, "", location.pathname + ((pending && pending.back) || ""));
  if (!pending || pending.state !== params.get("state")) {
    throw new Error("This sign-in answer is not for a sign-in started in this tab.");
  }
  if (params.has("error")) {
    throw new Error(`The identity provider did not sign you in (${params.get("error")}).`);
  }
  const r = await fetch(TOKEN_PATH, {
    method: "POST", cache: "no-store", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: params.get("code"), code_verifier: pending.verifier,
                           redirect_uri: pending.redirect_uri }),
  });
  if (!r.ok) throw new Error(`Sign-in failed: ${await messageOf(r)}`);
  sessionStorage.setItem(TOKEN_KEY, (await r.json()).token);
  return true;
}

// Adds the provider's button to the sign-in page (into `where`) when the API has one.
export async function offerOidc(where) {
  const config = await oidcConfig();
  if (!config || !where.isConnected) return;
  const button = h("button", { class: "primary", type: "button", id: "oidc-signin",
                               onclick: () => startOidcSignIn(config).catch((e) => {
                                 note.textContent = e.message;
                               }) },
  "Sign in with your identity provider");
  const note = h("p", { class: "meta", role: "status" }, `Provider: ${config.issuer}`);
  where.prepend(h("div", { class: "actions" }, button), note);
}
