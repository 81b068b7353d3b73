// The explorer's picture in the page (helpers/frames.py says why): a cache of pictures by the
// controls' values, shown the moment a control moves when the picture is already here.
//
// The kernel sends each picture once, with the control values it shows ("state"). This view
// reads the controls' values in the page itself, so a picture already sent is shown at once;
// otherwise the old one stays until the kernel's arrives. While the explorer is on screen, no
// answer is awaited and the page is not busy (a picture decoding to go up, for 2 s at most, or
// the picture of its values missing within a second of a move), the view asks for one more
// ("more"): the kernel draws the next picture a learner is likely to want (helpers/frames.py,
// likely_states) and answers with it, or with "done".

// A state's key: fractions to 12 significant digits, so a slider's 0.30000000000000004 in the
// page and 0.3 from the kernel name the same picture. A menu's entry is [label, index].
const round = (v) =>
  Array.isArray(v) ? v.map(round) : typeof v === "number" && !Number.isInteger(v) ? Number(v.toPrecision(12)) : v;
const keyOf = (state) => JSON.stringify(state.map(round));

// A message from the kernel, checked before the view acts on it: "frame" {state: one entry per
// control, prefetch: true or false, id} with the picture's bytes as one buffer, or "done" {id}.
// Returns null, or why not (the view drops it with one console line). helpers/frames.py checks
// the page's messages the same way (check_message); tests/test_frames.py runs this one in Node.
const MAX_TEXT = 100000;
const entryOk = (v) =>
  typeof v === "boolean" ||
  (typeof v === "number" && Number.isFinite(v)) ||
  (typeof v === "string" && v.length <= MAX_TEXT) ||
  (Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && v[0].length <= MAX_TEXT &&
    Number.isInteger(v[1]) && v[1] >= 0);
export function checkMessage(msg, buffers, controls) {
  if (msg === null || typeof msg !== "object" || Array.isArray(msg)) return `expected a message object, but got ${msg === null ? "null" : typeof msg}`;
  const idOk = msg.id === null || msg.id === undefined || (Number.isInteger(msg.id) && msg.id >= 0);
  if (msg.kind === "done") return idOk ? null : "expected the id of a 'done' message to be a whole number or null";
  if (msg.kind !== "frame") return `expected a message kind 'frame' or 'done', but got ${JSON.stringify(String(msg.kind)).slice(0, 40)}`;
  if (!idOk || typeof msg.prefetch !== "boolean") return "expected a 'frame' message's id to be a whole number or null and its prefetch true or false";
  if (!Array.isArray(msg.state) || msg.state.length !== controls || !msg.state.every(entryOk))
    return `expected a 'frame' message's state to hold ${controls} entries (a value or a menu's [label, index] each)`;
  const picture = buffers && buffers[0];
  if (!picture || typeof picture.byteLength !== "number" || picture.byteLength === 0) return "expected a 'frame' message to carry its picture's bytes";
  return null;
}

async function render({ model, el }) {
  el.classList.add("course-explorer-frames");
  let img = document.createElement("img"); // the picture on screen; each picture is its own <img>
  el.appendChild(img);

  const refs = model.get("controls");
  const kinds = model.get("kinds"); // "label": a menu, read by its option's label and index; "value": the rest
  let controls;
  try {
    controls = await Promise.all(refs.map((ref) => model.widget_manager.get_model(ref.replace("IPY_MODEL_", ""))));
  } catch (error) {
    // A front end that cannot hand over the controls: no hello, so the kernel keeps
    // updating the plain picture below, as without this widget.
    console.warn("explorer: the controls are out of reach, the picture stays with the kernel", error);
    return;
  }
  // the change that moves each control's entry in the state
  const events = kinds.map((kind) => (kind === "label" ? "change:index change:_options_labels" : "change:value"));
  const state = () =>
    controls.map((c, i) =>
      kinds[i] === "label" ? [c.get("_options_labels")[c.get("index")], c.get("index")] : c.get("value")
    );

  // key -> {state, png: its bytes, img: an <img> of it, asked to decode, or null}. Both Maps
  // keep the order of use, least recent first. `pictures` lets the least recently used go
  // when it holds more than `keep` (the kernel is told, and sends them again if they are
  // wanted); `decoded` keeps the last WARM of them as <img> elements the browser was asked to
  // decode (1-2 MB each once decoded, against a PNG's 20-60 kB), so the likeliest next moves
  // (the kernel sends those first) are a swap. A picture that leaves it loses its element and
  // its object URL, and with them the browser's decoded copy.
  const pictures = new Map();
  const decoded = new Map();
  const keep = model.get("keep");
  const WARM = 24;
  let shown = null;
  // The "more" on its way to the kernel: its number, and when to give it up for lost (a
  // reconnect) and ask again; the wait doubles each time, so a busy kernel is not flooded.
  let asked = 0;
  let asking = null;
  let patience = 10000;
  let said = false; // hello sent
  let plain = null; // JupyterLab: the plain picture to hide once the live one is up
  let done = false; // the kernel has nothing more to draw for these values
  let alive = true; // the view is on the page (false once JupyterLab removed it)
  let moveAt = performance.now(); // when the controls last moved
  let wantedAt = -Infinity; // when the page last asked for the picture of the values it shows
  let swapping = 0; // pictures waiting for their decode to go up

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
      const img = picture.img;
      img.decode().then(() => { img.ready = true; }, () => null);
    }
    recent(decoded, key, picture);
    for (const [k, p] of decoded) {
      if (decoded.size <= WARM) break;
      if (k !== shown) cool(k, p);
    }
  };

  // An image loaded (or failed to): its size is known, so swapping it in moves nothing.
  const loaded = (image) =>
    image.complete
      ? Promise.resolve()
      : new Promise((resolve) => {
          image.addEventListener("load", resolve, { once: true });
          image.addEventListener("error", resolve, { once: true });
        });
  // from: "page" when a move found its picture here, "kernel" when the picture just arrived
  // (scripts/benchmark.py --browser counts them). A picture not decoded yet replaces the old
  // one once it is, so the explorer does not blink. Chromium may not finish decoding an image
  // outside the page until it draws a frame, which a page with nothing moving may never do:
  // so after a second the picture goes up once loaded (the browser then decodes it as it
  // draws, and may show it part-drawn for a moment), and `late` counts those swaps
  // (scripts/benchmark.py --browser reports them). A decode takes 5-20 ms on a quiet
  // machine, hundreds on a busy one.
  const show = (from) => {
    const key = keyOf(state());
    const picture = pictures.get(key);
    el.dataset.waiting = picture ? "no" : "yes";
    el.dataset.key = key; // the values it looked for (tests/test_browser.py prints them if stuck)
    if (!picture || key === shown) return;
    recent(pictures, key, picture);
    warm(key, picture);
    shown = key;
    const next = picture.img;
    next.dataset.from = from;
    // only if these values are still wanted and this element is still their picture's (not
    // cooled, its URL revoked, nor replaced by a picture the kernel drew for a move)
    const swap = (how) => {
      if (alive && shown === key && pictures.get(key) === picture && picture.img === next && img !== next) {
        const old = img;
        img.replaceWith(next);
        img = next;
        if (plain) {
          plain.style.display = "none"; // the live picture is up: the plain one below gives way
          plain = null;
        }
        // an element no warm picture holds any more (cooled while on screen): its URL goes too
        if (old.src && ![...decoded.values()].some((p) => p.img === old)) URL.revokeObjectURL(old.src);
        if (how === "late") el.dataset.late = String(Number(el.dataset.late || 0) + 1);
      }
    };
    if (next.ready) swap("decoded");
    else {
      const decodedNow = next.decode().then(() => "decoded", () => "decoded");
      const late = new Promise((resolve) => setTimeout(resolve, 1000)).then(() => loaded(next)).then(() => "late");
      // Counted as busy (no guess asked for) until it is decoded and up, or the swap is given up
      // for a newer picture, or for 2 s at most. A late swap puts it up before its decode is
      // done, so the count waits for that decode (within the same 2 s).
      swapping += 1;
      let counted = true;
      const release = () => {
        if (!counted) return;
        counted = false;
        swapping -= 1;
        ask();
      };
      setTimeout(release, 2000);
      Promise.race([decodedNow, late]).then((how) => {
        swap(how);
        if (how === "late") next.decode().then(release, release);
        else release();
      });
    }
  };
  // On screen: some of the explorer (its controls or this picture) in the window, the tab
  // shown, the output not collapsed (a hidden element's box is empty).
  const onScreen = () => {
    if (!el.isConnected || document.visibilityState !== "visible") return false;
    const box = (el.parentElement || el).getBoundingClientRect();
    return box.width > 0 && box.height > 0 && box.bottom >= 0 && box.top <= window.innerHeight;
  };
  // Busy: a picture is being decoded to go up (for 2 s at most), or the page lacks the picture
  // of its values within a second of a move (the kernel is likely drawing it; values it refuses
  // draw nothing). A guess drawn then would compete for the CPU with that decode or drawing (on
  // a 2-core machine, the page and the kernel each have about one core), so the next request
  // waits until busy ends: a swap's end asks at once, the 250 ms tick below after a move.
  const busy = () => swapping > 0 || (!pictures.has(keyOf(state())) && performance.now() - moveAt < 1000);
  const ask = () => {
    if (!said || !alive) return;
    if (asking && performance.now() > asking.until) {
      asking = null;
      patience = Math.min(2 * patience, 300000);
    }
    el.dataset.prefetch = done ? "done" : asking ? "asking" : "idle";
    if (!asking && !done && !busy() && onScreen()) {
      asked += 1;
      asking = { id: asked, until: performance.now() + patience };
      el.dataset.prefetch = "asking";
      model.send({ kind: "more", id: asked });
    }
  };
  // Once in the page: say hello; the kernel answers with the current picture. The plain
  // picture the kernel displayed below the controls must give way. In JupyterLab this view
  // hides it (the cell's next output, if it is an image) once the live picture is up, and the
  // saved notebook keeps it; elsewhere the kernel empties it.
  const born = performance.now();
  const hello = () => {
    if (said || !el.isConnected) return;
    const output = el.closest(".jp-OutputArea-child");
    const next = output && output.nextElementSibling;
    const found = Boolean(next && next.classList.contains("jp-OutputArea-child") && next.querySelector("img"));
    // the plain picture comes just after the controls: wait for it (5 s at most)
    if (output && !found && performance.now() - born < 5000) return;
    said = true;
    if (found) plain = next;
    model.send({ kind: "hello", lab: Boolean(output) });
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
  // The picture of the controls' values is missing and the kernel has nothing more to send
  // ("done"), or it is still missing 3 s after a move: ask for it by its values ("want"). The
  // kernel sends it if its controls hold the same values, whatever it believes the page holds
  // (a lost message, or a second view of this widget, must not leave the old picture up for
  // good). At most every 5 s; `wanted` counts these requests.
  const want = (now) => {
    if (!said || pictures.has(keyOf(state())) || now - wantedAt < 5000) return;
    wantedAt = now;
    el.dataset.wanted = String(Number(el.dataset.wanted || 0) + 1);
    model.send({ kind: "want", state: state() });
  };
  const moved = () => {
    moveAt = performance.now();
    show("page");
    done = false;
    ask();
  };
  controls.forEach((c, i) => c.on(events[i], moved));

  const received = (msg, buffers) => {
    const problem = checkMessage(msg, buffers, controls.length);
    if (problem) {
      console.warn(`explorer: a message from the kernel was dropped: ${problem}`);
      return;
    }
    if (msg.kind === "frame") {
      const key = keyOf(msg.state);
      if (!pictures.has(key) || !msg.prefetch) {
        // a picture drawn for a move replaces one held (a kernel that drew it knows better)
        if (pictures.has(key)) cool(key, pictures.get(key));
        const png = new Uint8Array(buffers[0].buffer, buffers[0].byteOffset, buffers[0].byteLength).slice();
        recent(pictures, key, { state: msg.state, png, img: null });
        if (key === shown) shown = null;
      }
      warm(key, pictures.get(key)); // the kernel sends the likeliest first: keep them ready
      if (msg.prefetch && asking && msg.id === asking.id) {
        asking = null;
        patience = 10000;
      }
      show("kernel");
      letGo();
      el.dataset.pictures = String(pictures.size);
    } else if (msg.kind === "done") {
      if (asking && msg.id !== asking.id) return; // the answer to a request given up for lost
      asking = null;
      patience = 10000;
      done = true;
      want(performance.now());
    }
    ask();
  };
  model.on("msg:custom", received);

  const looking = setInterval(() => {
    hello();
    ask(); // starts asking once the explorer is scrolled into view, and again once busy ends
    if (performance.now() - moveAt > 3000) want(performance.now());
  }, 250);
  hello();

  return () => {
    alive = false;
    clearInterval(looking);
    model.off("msg:custom", received);
    controls.forEach((c, i) => c.off(events[i], moved));
    for (const [key, picture] of pictures) cool(key, picture);
    if (img.src) URL.revokeObjectURL(img.src);
  };
}

export default { render };
