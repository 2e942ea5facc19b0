// The page as the model reads it: one line per visible element that matters, with a stable
// id on everything it can act on. Runs in the page (Playwright's evaluate); returns
// {lines: [[depth, y, text]], scrollY, height}. Ids: an element keeps the data-ludus-id the
// application gave it; others get the next free number, stored on the element so that the
// same element keeps its id for the rest of the page's life.
(options) => {
  const tagText = options.tagText;
  const maxName = 80;
  const interactiveTags = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY"]);
  const interactiveRoles = new Set([
    "button", "link", "checkbox", "radio", "tab", "menuitem", "option", "textbox", "combobox",
    "switch", "slider", "spinbutton", "searchbox", "treeitem", "listbox",
  ]);
  const skip = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "SVG", "svg"]);
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  const quote = (s, limit = maxName) => JSON.stringify(s.length > limit ? s.slice(0, limit) + "…" : s);

  const used = new Set();
  for (const el of document.querySelectorAll("[data-ludus-id]")) used.add(el.getAttribute("data-ludus-id"));
  let next = window.__ludusNext || 1;
  const idOf = (el) => {
    let id = el.getAttribute("data-ludus-id");
    if (id === null) {
      while (used.has(String(next))) next++;
      id = String(next++);
      used.add(id);
      el.setAttribute("data-ludus-id", id);
    }
    return id;
  };

  const visible = (el) => {
    if (el.hidden || el.getAttribute("aria-hidden") === "true") return false;
    if (typeof el.checkVisibility === "function") {
      return el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true });
    }
    const style = getComputedStyle(el);
    return style.display !== "none" && style.visibility !== "hidden";
  };

  const labelText = (el) => {
    const aria = el.getAttribute("aria-label");
    if (aria) return clean(aria);
    const by = el.getAttribute("aria-labelledby");
    if (by) {
      const text = by.split(/\s+/).map((i) => document.getElementById(i)).filter(Boolean)
        .map((n) => n.textContent).join(" ");
      if (clean(text)) return clean(text);
    }
    if (el.labels && el.labels.length) return clean(Array.from(el.labels).map((l) => l.textContent).join(" "));
    return "";
  };

  const roleOf = (el) => {
    const role = el.getAttribute("role");
    if (role) return role;
    const tag = el.tagName;
    if (tag === "A") return "link";
    if (tag === "BUTTON" || tag === "SUMMARY") return "button";
    if (tag === "SELECT") return el.multiple ? "listbox" : "combobox";
    if (tag === "TEXTAREA") return "textbox";
    if (tag === "INPUT") {
      const type = (el.getAttribute("type") || "text").toLowerCase();
      if (["submit", "button", "reset", "image"].includes(type)) return "button";
      if (type === "checkbox" || type === "radio") return type;
      if (type === "range") return "slider";
      if (type === "number") return "spinbutton";
      if (type === "search") return "searchbox";
      return "textbox";
    }
    return "";
  };

  const isInteractive = (el) => {
    if (interactiveTags.has(el.tagName)) {
      if (el.tagName === "A" && !el.hasAttribute("href") && !el.hasAttribute("onclick")) return false;
      if (el.tagName === "INPUT" && (el.getAttribute("type") || "").toLowerCase() === "hidden") return false;
      return true;
    }
    const role = el.getAttribute("role");
    return (role && interactiveRoles.has(role)) || el.hasAttribute("onclick") || el.isContentEditable &&
      el.getAttribute("contenteditable") !== null;
  };

  const ownText = (el) => {
    let text = "";
    for (const node of el.childNodes) if (node.nodeType === Node.TEXT_NODE) text += " " + node.textContent;
    return clean(text);
  };

  const lines = [];
  const emit = (el, depth, text) => {
    const rect = el.getBoundingClientRect();
    lines.push([depth, Math.round(rect.top + window.scrollY), text]);
  };

  const describe = (el) => {
    const role = roleOf(el);
    const tag = el.tagName;
    let name = labelText(el);
    const type = (el.getAttribute("type") || "").toLowerCase();
    if (!name && tag === "INPUT" && ["submit", "button", "reset"].includes(type)) name = clean(el.value);
    if (!name && (tag === "INPUT" || tag === "TEXTAREA")) name = clean(el.getAttribute("placeholder"));
    if (!name && tag !== "SELECT" && tag !== "INPUT" && tag !== "TEXTAREA") name = clean(el.innerText);
    if (!name) name = clean(el.getAttribute("title") || el.getAttribute("alt") || "");
    let text = `[${idOf(el)}] ${role || tag.toLowerCase()} ${quote(name)}`;
    if (role === "checkbox" || role === "radio") text += el.checked ? " checked" : " unchecked";
    else if (tag === "SELECT") {
      const options = Array.from(el.options).map((o) => clean(o.textContent));
      const chosen = Array.from(el.selectedOptions).map((o) => clean(o.textContent));
      text += ` value=${quote(chosen.join(", "))} options: ${options.slice(0, 30).map((o) => quote(o)).join(" | ")}`;
      if (options.length > 30) text += ` (+${options.length - 30} more)`;
    } else if ((tag === "INPUT" || tag === "TEXTAREA") && !["submit", "button", "reset"].includes(type)) {
      const value = type === "password" ? "•".repeat(el.value.length) : el.value;
      text += ` value=${quote(value)}`;
    }
    if (el.disabled) text += " disabled";
    if (document.activeElement === el) text += " focused";
    return text;
  };

  const walk = (el, depth) => {
    if (skip.has(el.tagName) || !visible(el)) return;
    if (isInteractive(el)) {
      emit(el, depth, describe(el));
      if (el.tagName !== "SELECT" && el.tagName !== "A" && el.tagName !== "BUTTON") {
        for (const child of el.children) walk(child, depth + 1);
      }
      return;
    }
    const tag = el.tagName;
    let childDepth = depth;
    if (/^H[1-6]$/.test(tag)) {
      emit(el, depth, `heading ${quote(clean(el.innerText), 200)}`);
      for (const child of el.children) if (isInteractive(child)) walk(child, depth + 1);
      return;
    }
    if (tag === "IMG") {
      const alt = clean(el.getAttribute("alt"));
      if (alt) emit(el, depth, (tagText ? `[${idOf(el)}] ` : "") + `img ${quote(alt)}`);
      return;
    }
    if (tag === "TR") {
      const cells = Array.from(el.children).filter(visible);
      const flat = cells.every((c) => !c.querySelector("a,button,input,select,textarea,[role],[onclick]"));
      if (flat) {
        emit(el, depth, "row: " + cells.map((c) => clean(c.innerText).slice(0, 200)).join(" | "));
        return;
      }
    }
    // a label's words are already its control's name
    const text = tag === "LABEL" && el.control && visible(el.control) ? "" : ownText(el);
    if (text) {
      emit(el, depth, (tagText ? `[${idOf(el)}] ` : "") + `text ${quote(text, 400)}`);
      childDepth = depth + 1;
    }
    for (const child of el.children) walk(child, childDepth);
  };

  if (document.body) walk(document.body, 0);
  window.__ludusNext = next;
  return {
    lines,
    scrollY: Math.round(window.scrollY),
    viewport: window.innerHeight,
    title: document.title,
  };
}
