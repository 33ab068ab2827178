// Settings: the broker's dynamic configuration (pulsar-admin brokers update-dynamic-config), for super users. Each
// dynamic setting with the value in force and the one stored for the cluster, if any; Change stores a value for every
// broker of the cluster, Reset takes it out (each broker goes back to its configuration file's value).
import { del, enc, get, post } from "./api.js";
import { ask, denied, fill, h, notice, showError, table } from "./ui.js";

const BASE = "/admin/v2/brokers/configuration";

export async function settingsPage(main, _params, ctx) {
  // (all three asked at once; a refusal shown is the first call's, whichever answered first)
  const answers = await Promise.allSettled([get(BASE), get(`${BASE}/values`), get(`${BASE}/runtime`)]);
  const refused = answers.find((a) => a.status === "rejected");
  if (refused) {
    if (refused.reason.signIn) throw refused.reason;
    fill(main, h("h1", {}, "Settings"), denied(refused.reason));
    return;
  }
  const [names, stored, runtime] = answers.map((a) => a.value);
  const reload = () => { if (ctx.alive()) settingsPage(main, _params, ctx); };

  const change = async (name) => {
    const value = await ask({ title: `Change ${name}`, label: "Value", value: stored[name] ?? runtime[name] ?? "",
      text: "Stored for every broker of the cluster; each applies it at once and at its next start.", okText: "Change" });
    if (value === null) return;
    try {
      await post(`${BASE}/${enc(name)}/${enc(value)}`);
      notice(`${name} = ${value}`);
    } catch (error) { showError(error, `Change ${name}`); }
    reload();
  };
  const reset = async (name) => {
    if (!(await ask({ title: `Reset ${name}`, okText: "Reset",
      text: "Each broker goes back to the value of its configuration file." }))) return;
    try {
      await del(`${BASE}/${enc(name)}`);
      notice(`${name} reset`);
    } catch (error) { showError(error, `Reset ${name}`); }
    reload();
  };

  const rows = names.map((name) => [
    name,
    runtime[name] ?? "",
    name in stored ? stored[name] : "-",
    h("span", {},
      h("button", { onclick: () => change(name) }, "Change"),
      name in stored ? h("button", { onclick: () => reset(name) }, "Reset") : null),
  ]);
  const others = Object.keys(stored).filter((k) => !names.includes(k)).sort();
  fill(main,
    h("h1", {}, "Settings"),
    h("p", { class: "muted" }, "The settings that can change while the brokers run. A value stored here applies to " +
      "every broker of the cluster, over its configuration file."),
    table(["Setting", "In force", "Stored", ""], rows, { id: "settings" }),
    others.length ? h("p", { class: "muted", "data-testid": "settings-ignored" },
      `Stored but not dynamic here (ignored): ${others.join(", ")}`) : null);
}
