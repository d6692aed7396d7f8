// The tool runner: pick a configured identity and one of the tools it sees, fill a form made
// from the tool's input schema, and run it through the whole pipeline; the result, its plan
// and its call record come back side by side.

let ui = null; // { api, h, $ }
let tools = [];

export function startRunner(helpers) {
  ui = helpers;
  const { $ } = ui;
  $("r-identity").onchange = () => loadTools().catch((e) => { $("r-error").textContent = e.message; });
  $("r-tool").onchange = () => renderForm();
  $("r-run").onclick = () => run();
  loadIdentities().catch((e) => { $("r-error").textContent = e.message; });
}

async function loadIdentities() {
  const { api, h, $ } = ui;
  const { identities } = await api("/admin/tools/identities");
  $("r-identity").replaceChildren(...identities.map((i) =>
    h("option", { value: i.name }, i.roles.length ? `${i.name} (${i.roles.join(", ")})` : `${i.name} (${i.kind})`)));
  await loadTools();
}

async function loadTools() {
  const { api, h, $ } = ui;
  const as = $("r-identity").value;
  ({ tools } = await api(`/admin/tools?as=${encodeURIComponent(as)}`));
  $("r-tool").replaceChildren(...tools.map((t) => h("option", { value: t.name }, t.name)));
  renderForm();
}

const typeOf = (p) => (p.enum ? "enum" : Array.isArray(p.type) ? p.type[0] : p.type || "json");

function renderForm() {
  const { h, $ } = ui;
  const tool = tools.find((t) => t.name === $("r-tool").value);
  $("r-access").textContent = tool ? `${tool.access}${tool.description ? " — " + tool.description : ""}` : "no tool visible";
  const schema = (tool && tool.input_schema) || {};
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties || {}).map(([name, p]) => {
    const type = typeOf(p);
    const attrs = { id: `r-arg-${name}`, "data-arg": name, "data-type": type };
    let input;
    if (type === "enum") input = h("select", attrs, h("option", { value: "" }, ""), ...p.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
    else if (type === "boolean") input = h("input", { ...attrs, type: "checkbox" });
    else if (type === "number" || type === "integer") input = h("input", { ...attrs, type: "number", step: type === "integer" ? "1" : "any" });
    else if (type === "string") input = h("input", { ...attrs, type: "text" });
    else input = h("textarea", { ...attrs, rows: 2, placeholder: "JSON" });
    return h("label", { class: "arg" }, `${p.title || name}${required.has(name) ? " *" : ""}`, input);
  });
  $("r-form").replaceChildren(...fields);
}

function argsOf() {
  const { $ } = ui;
  const args = {};
  for (const el of $("r-form").querySelectorAll("[data-arg]")) {
    const name = el.dataset.arg;
    const type = el.dataset.type;
    if (type === "boolean") { if (el.checked) args[name] = true; continue; }
    if (el.value === "") continue;
    if (type === "number" || type === "integer") args[name] = Number(el.value);
    else if (type === "string") args[name] = el.value;
    else args[name] = JSON.parse(el.value); // enum options hold JSON; textareas are JSON
  }
  return args;
}

async function run() {
  const { api, $ } = ui;
  $("r-error").textContent = "";
  let args;
  try {
    args = argsOf();
  } catch (e) {
    $("r-error").textContent = `Not JSON: ${e.message}`;
    return;
  }
  try {
    const r = await api("/admin/tools/call", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ as: $("r-identity").value, tool: $("r-tool").value, arguments: args }),
    });
    $("r-outcome").textContent = r.outcome;
    $("r-outcome").dataset.value = r.outcome;
    $("r-result").textContent = JSON.stringify(r.result, null, 2);
    $("r-plan").textContent = r.plan ? JSON.stringify(r.plan, null, 2) : "(no plan)";
    $("r-record").textContent = r.record ? JSON.stringify(r.record, null, 2) : "(no record)";
  } catch (e) {
    $("r-error").textContent = e.message;
  }
}
