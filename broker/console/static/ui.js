// DOM helpers (text is always set as text: nothing from the broker is parsed as HTML), the
// notice line and the dialogs.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

let noticeTimer = 0;
export function notice(text, bad = false) {
  const el = document.getElementById("notice");
  el.textContent = text;
  el.classList.toggle("bad", bad);
  el.hidden = false;
  el.dataset.kind = bad ? "error" : "ok";
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, bad ? 12000 : 5000);
}

export function showError(error, what = "") {
  const where = what ? `${what}: ` : "";
  notice(error && error.status ? `${where}${error.status} ${error.reason}` : `${where}${error}`, true);
}

// Ask before an action: resolves to true (or the typed value when an input is asked for), or null.
export function ask({ title, text = "", label = "", value, okText = "OK", danger = false }) {
  const dialog = document.getElementById("ask");
  document.getElementById("ask-title").textContent = title;
  document.getElementById("ask-text").textContent = text;
  const field = document.getElementById("ask-field");
  const input = document.getElementById("ask-input");
  field.hidden = value === undefined;
  document.getElementById("ask-label").textContent = label;
  input.value = value ?? "";
  const ok = document.getElementById("ask-ok");
  ok.textContent = okText;
  ok.classList.toggle("danger", danger);
  // Settled by the dialog's own buttons (not its close event, which arrives later and could
  // reach the next question).
  return new Promise((resolve) => {
    const form = document.getElementById("ask-form");
    const cancel = document.getElementById("ask-cancel");
    const finish = (result) => {
      form.removeEventListener("submit", onSubmit);
      cancel.removeEventListener("click", onCancel);
      dialog.removeEventListener("cancel", onEscape);
      dialog.close();
      resolve(result);
    };
    const onSubmit = (event) => { event.preventDefault(); finish(value === undefined ? true : input.value); };
    const onCancel = () => finish(null);
    const onEscape = (event) => { event.preventDefault(); finish(null); };
    form.addEventListener("submit", onSubmit);
    cancel.addEventListener("click", onCancel);
    dialog.addEventListener("cancel", onEscape);
    dialog.showModal();
    (value === undefined ? ok : input).focus();
  });
}

export function table(headers, rows, { empty = "None.", id } = {}) {
  if (!rows.length) return h("p", { class: "muted", "data-testid": id ? `${id}-empty` : undefined }, empty);
  return h("table", { "data-testid": id },
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: x.startsWith("#") ? "num" : "" }, x.replace(/^#/, ""))))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c, i) =>
      h("td", { class: headers[i].startsWith("#") ? "num" : headers[i] === "" ? "actions" : "" }, c))))));
}

export function card(label, value, id) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label),
    h("div", { class: "value", "data-testid": id }, value));
}

export function bytes(n) {
  if (!Number.isFinite(n)) return "-";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function duration(seconds) {
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hh}h ${m}m` : hh ? `${hh}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s % 60}s`;
}

// A section whose data the role may not see: say so instead of failing.
export function denied(error) {
  return h("div", { class: "denied", "data-testid": "denied" },
    error.notAllowed ? `Not allowed for this role: ${error.reason}` : `Could not load: ${error.status ?? ""} ${error.reason ?? error}`);
}

// Replace an element's children (null, false and undefined are left out; arrays are flattened).
export function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
  return el;
}
