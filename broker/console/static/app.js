// The console: a hash router over a few pages, a sign-in dialog when the broker asks for
// credentials, and timers owned by the page that is shown (stopped when it is left).
import { auth, basic, bearer, get, onUnauthorized } from "./api.js";
import { overviewPage } from "./overview.js";
import { settingsPage } from "./settings.js";
import { namespacePage, namespacesPage, tenantsPage } from "./tenants.js";
import { topicPage } from "./topic.js";
import { topicsPage } from "./topics.js";
import { h, showError } from "./ui.js";

const ROUTES = [
  [/^\/?$/, overviewPage, "overview"],
  [/^\/tenants$/, tenantsPage, "tenants"],
  [/^\/namespaces(?:\/([^/]+))?$/, namespacesPage, "namespaces"],
  [/^\/namespace\/([^/]+)\/([^/]+)$/, namespacePage, "namespaces"],
  [/^\/topics(?:\/([^/]+)\/([^/]+))?$/, topicsPage, "topics"],
  [/^\/topic\/(persistent|non-persistent)\/([^/]+)\/([^/]+)\/(.+)$/, topicPage, "topics"],
  [/^\/settings$/, settingsPage, "settings"],
];

let current = null; // the page being shown: {timers, alive}

function context() {
  const page = { timers: [], alive: true };
  current = page;
  return {
    every(ms, fn) {
      let running = false;
      const tick = async () => {
        if (!page.alive || running) return;
        running = true;
        try { await fn(); } catch (error) {
          if (page.alive && !error.signIn) showError(error); // (the sign-in dialog is up)
        } finally { running = false; }
      };
      page.timers.push(setInterval(tick, ms));
      return tick;
    },
    alive: () => page.alive,
    go: (hash) => { location.hash = hash; },
  };
}

async function route() {
  stopPage();
  const path = decodeURI(location.hash.replace(/^#/, "").split("?")[0]);
  const main = document.getElementById("main");
  const ctx = context();
  for (const [pattern, page, nav] of ROUTES) {
    const m = pattern.exec(path);
    if (!m) continue;
    document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
    main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    delete main.dataset.ready;
    // The page renders into its own element, shown when it is ready, unless another page was
    // asked for meanwhile (a slow page never covers a newer one).
    const view = h("div", { class: "view" });
    try {
      await page(view, m.slice(1).map((x) => (x === undefined ? x : decodeURIComponent(x))), ctx);
    } catch (error) {
      if (error.signIn || !ctx.alive()) return; // (the sign-in dialog is up, or another page)
      view.replaceChildren(h("h1", {}, "Error"),
        h("p", { class: "error", "data-testid": "page-error" }, error.status ? `${error.status} ${error.reason}` : String(error)));
    }
    if (!ctx.alive()) return;
    main.replaceChildren(view);
    main.dataset.ready = path || "/";
    return;
  }
  main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, `No page at ${path}`));
}

// -- sign-in -------------------------------------------------------------------------------------
function showWho() {
  const role = auth.role();
  document.getElementById("who").textContent = role ? `signed in as ${role}` : "";
  document.getElementById("logout").hidden = !auth.get();
}

function stopPage() {
  if (current) {
    current.alive = false;
    current.timers.forEach(clearInterval);
  }
}

function loginDialog(error) {
  stopPage(); // (its polling would only be refused; the page is shown again after sign-in)
  const dialog = document.getElementById("login");
  const message = document.getElementById("login-error");
  if (auth.get()) {
    // The stored credentials were refused (expired or revoked).
    auth.clear();
    message.textContent = `Signed out: ${error.reason}`;
    message.hidden = false;
  }
  showWho();
  if (!dialog.open) dialog.showModal();
}

function setupLogin() {
  const form = document.getElementById("login-form");
  const dialog = document.getElementById("login");
  const message = document.getElementById("login-error");
  form.addEventListener("change", () => {
    const method = form.elements.method.value;
    form.querySelectorAll("[data-for]").forEach((el) => { el.hidden = el.dataset.for !== method; });
  });
  dialog.addEventListener("cancel", (event) => event.preventDefault()); // (no data without credentials)
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const method = form.elements.method.value;
    const credential = method === "token"
      ? bearer(document.getElementById("login-token").value)
      : basic(document.getElementById("login-user").value, document.getElementById("login-password").value);
    try {
      // Checked with a call any authenticated role may make.
      await get("/admin/v2/clusters", { authorization: credential });
    } catch (error) {
      message.textContent = error.signIn ? `Not signed in: ${error.reason}` : `Sign-in check failed: ${error.status ?? ""} ${error.reason ?? error}`;
      message.hidden = false;
      return;
    }
    auth.set(credential);
    document.getElementById("login-password").value = "";
    document.getElementById("login-token").value = "";
    message.hidden = true;
    dialog.close();
    showWho();
    route();
  });
  document.getElementById("logout").addEventListener("click", () => {
    auth.clear();
    showWho();
    location.hash = "#/";
    route();
  });
  onUnauthorized(loginDialog);
}

setupLogin();
showWho();
window.addEventListener("hashchange", route);
route();
