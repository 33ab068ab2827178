// Every call of the console goes through here: the admin REST of the broker that served the page,
// with the user's credentials as an Authorization header (never in a URL, never a cookie, never
// logged). Credentials live in this tab's sessionStorage only.
const KEY = "pulsar-console-authorization";

// What the broker answers, as Pulsar's AuthenticationFilter does, to missing or refused credentials.
// Other 401s, and 403s, refuse an authenticated role (Pulsar answers 401 from its super-user, tenant and
// topic-operation checks, 403 from its namespace and policy checks).
const AUTHENTICATION_REQUIRED = "Authentication required";

export class ApiError extends Error {
  constructor(status, reason, method, path) {
    super(`${status}: ${reason}`);
    this.status = status;
    this.reason = reason;
    this.method = method;
    this.path = path;
    this.signIn = status === 401 && reason === AUTHENTICATION_REQUIRED; // (credentials needed)
    this.notAllowed = status === 403 || (status === 401 && !this.signIn); // (this role may not)
  }
}

export const auth = {
  get() { return sessionStorage.getItem(KEY); },
  set(value) { sessionStorage.setItem(KEY, value); },
  clear() { sessionStorage.removeItem(KEY); },
  role() {
    const value = this.get();
    if (!value) return "";
    if (value.startsWith("Basic ")) {
      try { return atob(value.slice(6)).split(":")[0]; } catch { return "basic"; }
    }
    try {
      const payload = JSON.parse(atob(value.slice(7).split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
      return payload.sub || "token";
    } catch { return "token"; }
  },
};

export function bearer(token) { return `Bearer ${token.trim()}`; }
export function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return `Basic ${btoa(String.fromCharCode(...bytes))}`;
}

// Listeners told when the broker asks for credentials (the console then shows the sign-in dialog).
const unauthorized = new Set();
export function onUnauthorized(fn) { unauthorized.add(fn); }

// path segments are encoded by the caller with enc().
export function enc(segment) { return encodeURIComponent(segment); }
// A subscription in .../subscription/{sub}: Pulsar decodes it twice (as a path segment, then with Java's
// URLDecoder), so it is encoded as Pulsar's admin client does: Java's URLEncoder (letters, digits and .-*_ kept, a
// space "+", other bytes %XX), then as a segment. "s b+c" is sent as s%2Bb%252Bc.
export function encSub(name) {
  const javaEncoded = encodeURIComponent(name).replace(/[!'()~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`).replace(/%20/g, "+");
  return enc(javaEncoded);
}

export async function call(method, path, { body, raw = false, authorization } = {}) {
  const headers = { Accept: "application/json" };
  const credential = authorization ?? auth.get();
  if (credential) headers.Authorization = credential;
  const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let reason = response.statusText;
    try {
      const text = await response.text();
      try { reason = JSON.parse(text).reason || text || reason; } catch { reason = text || reason; }
    } catch { /* keep the status text */ }
    const error = new ApiError(response.status, reason, method, path);
    if (error.signIn && authorization === undefined) unauthorized.forEach((fn) => fn(error));
    throw error;
  }
  if (raw) return response;
  if (response.status === 204) return null;
  const type = response.headers.get("Content-Type") || "";
  const text = await response.text();
  if (text === "") return null; // (a value not set: 200 with no body, as Pulsar answers it)
  return type.includes("json") ? JSON.parse(text) : text;
}

export const get = (path, opts) => call("GET", path, opts);
export const put = (path, body) => call("PUT", path, { body });
export const post = (path, body) => call("POST", path, { body });
export const del = (path) => call("DELETE", path);
