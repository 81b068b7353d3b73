// The explorer's picture in the page (helpers/frames.py says why): a cache of pictures by the
// controls' values, shown the moment a control moves when the picture is already here.
//
// The kernel sends each picture once, with the control values it shows ("state"). This view
// reads the controls' values in the page itself, so a picture already sent is shown at once;
// otherwise the old one stays until the kernel's arrives. While the picture is on screen and
// the kernel has nothing else to send, the view asks for one more ("more"): the kernel draws
// the next picture a learner is likely to want (one slider step away, then two, ...) and
// answers with it, or with "done".

// A state's key: numbers to 12 significant digits, so a slider's 0.30000000000000004 in the
// page and 0.3 from the kernel name the same picture.
const keyOf = (state) =>
  JSON.stringify(state.map((v) => (typeof v === "number" ? Number(v.toPrecision(12)) : v)));

async function render({ model, el }) {
  el.classList.add("course-explorer-frames");
  let img = document.createElement("img"); // the picture on screen; each picture is its own <img>
  el.appendChild(img);

  const refs = model.get("controls");
  const kinds = model.get("kinds"); // "label": a menu, read by its option's label; "value": the rest
  let controls;
  try {
    controls = await Promise.all(refs.map((ref) => model.widget_manager.get_model(ref.replace("IPY_MODEL_", ""))));
  } catch (error) {
    // A front end that cannot hand over the controls: no hello, so the kernel keeps
    // updating the plain picture below, as without this widget.
    console.warn("explorer: the controls are out of reach, the picture stays with the kernel", error);
    return;
  }
  const state = () =>
    controls.map((c, i) => (kinds[i] === "label" ? c.get("_options_labels")[c.get("index")] : c.get("value")));

  // key -> {state, png: its bytes, img: a decoded <img> of it or null}. Both Maps keep the
  // order of use, least recent first. `pictures` lets the least recently used go when it
  // holds more than `keep` (the kernel is told, and sends them again if they are wanted);
  // `decoded` keeps the last WARM of them as decoded images (about 1 MB each, against a PNG's
  // 20-60 kB), so the likeliest next moves (the kernel sends those first) are a swap. A
  // picture that leaves it loses its element and its object URL, and with them the browser's
  // decoded copy.
  const pictures = new Map();
  const decoded = new Map();
  const keep = model.get("keep");
  const WARM = 24;
  let shown = null;
  let asking = false; // a "more" is on its way to the kernel
  let done = false; // the kernel has nothing more to draw for these values

  const recent = (map, key, value) => {
    map.delete(key);
    map.set(key, value);
  };
  const cool = (key, picture) => {
    if (picture.img && picture.img !== img) URL.revokeObjectURL(picture.img.src);
    picture.img = null;
    decoded.delete(key);
  };
  const warm = (key, picture) => {
    if (!picture.img) {
      picture.img = document.createElement("img");
      picture.img.className = "course-explorer-picture";
      picture.img.alt = "the explorer's picture";
      picture.img.src = URL.createObjectURL(new Blob([picture.png], { type: "image/png" }));
      picture.img.decode().catch(() => null);
    }
    recent(decoded, key, picture);
    for (const [k, p] of decoded) {
      if (decoded.size <= WARM) break;
      if (k !== shown) cool(k, p);
    }
  };

  // from: "page" when a move found its picture here, "kernel" when the picture just arrived
  // (scripts/benchmark.py --browser counts them). A picture not decoded yet replaces the old
  // one once it is, so the explorer never blinks.
  const show = (from) => {
    const key = keyOf(state());
    const picture = pictures.get(key);
    el.dataset.waiting = picture ? "no" : "yes";
    if (!picture || key === shown) return;
    recent(pictures, key, picture);
    const ready = decoded.has(key);
    warm(key, picture);
    shown = key;
    const next = picture.img;
    next.dataset.from = from;
    const swap = () => {
      if (shown === key && img !== next) {
        img.replaceWith(next);
        img = next;
      }
    };
    if (ready) swap();
    else next.decode().catch(() => null).then(swap);
  };
  // On screen: some of the explorer (its controls or this picture) in the window, the tab shown.
  const onScreen = () => {
    if (!el.isConnected || document.visibilityState !== "visible") return false;
    const box = (el.parentElement || el).getBoundingClientRect();
    return box.bottom >= 0 && box.top <= window.innerHeight;
  };
  const ask = () => {
    el.dataset.prefetch = done ? "done" : asking ? "asking" : "idle";
    if (!asking && !done && onScreen()) {
      asking = true;
      el.dataset.prefetch = "asking";
      model.send({ kind: "more" });
    }
  };
  const letGo = () => {
    const gone = [];
    for (const key of pictures.keys()) {
      if (pictures.size - gone.length <= keep) break;
      if (key !== shown) gone.push(key);
    }
    if (!gone.length) return;
    model.send({ kind: "forget", states: gone.map((key) => pictures.get(key).state) });
    for (const key of gone) {
      cool(key, pictures.get(key));
      pictures.delete(key);
    }
  };
  const moved = () => {
    show("page");
    done = false;
    ask();
  };
  for (const [i, c] of controls.entries()) {
    c.on(kinds[i] === "label" ? "change:index change:_options_labels" : "change:value", moved);
  }

  const received = (msg, buffers) => {
    if (msg.kind === "frame") {
      const key = keyOf(msg.state);
      if (!pictures.has(key)) {
        const png = new Uint8Array(buffers[0].buffer, buffers[0].byteOffset, buffers[0].byteLength).slice();
        pictures.set(key, { state: msg.state, png, img: null });
      }
      warm(key, pictures.get(key)); // the kernel sends the likeliest first: keep them ready
      if (msg.prefetch) asking = false;
      show("kernel");
      letGo();
      el.dataset.pictures = String(pictures.size);
    } else if (msg.kind === "done") {
      asking = false;
      done = true;
    }
    ask();
  };
  model.on("msg:custom", received);

  const looking = setInterval(ask, 250); // starts asking once the picture is scrolled into view

  // The kernel answers with the current picture and has the plain one below give way (in
  // JupyterLab, whose output areas this view sits in, by hiding it; elsewhere by emptying it).
  model.send({ kind: "hello", lab: el.closest(".jp-OutputArea") !== null });

  return () => {
    clearInterval(looking);
    model.off("msg:custom", received);
    for (const [i, c] of controls.entries()) {
      c.off(kinds[i] === "label" ? "change:index change:_options_labels" : "change:value", moved);
    }
    for (const [key, picture] of pictures) cool(key, picture);
  };
}

export default { render };
