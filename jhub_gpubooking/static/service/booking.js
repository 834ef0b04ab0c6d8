"use strict";
// Reservation page of jhub-gpubooking. Plain browser JS, no build step.
// The server renders the config (API URL, user, slot grid) and the XSRF token into the page.
// The API sends UTC "Z" times; the page shows them in the browser's zone and sends UTC back.
// All rules live in the API: the page shows its refusal messages as they are.

(() => {
  const config = JSON.parse(document.getElementById("gpu-booking-config").textContent);
  const xsrfToken = document.querySelector('meta[name="xsrf-token"]').content;
  const SLOT_MS = config.slotMinutes * 60_000;
  const HOUR_MS = 3_600_000;
  const DAY_MS = 24 * HOUR_MS;
  const ACTIVE_STATES = new Set(["upcoming", "active"]);

  const page = { pools: [], poolsByName: new Map(), range: null, myBookings: [] };
  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- helpers

  /** Build a DOM element; text children are inserted as text, never as HTML. */
  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "dataset") Object.assign(node.dataset, value);
      else if (name === "style") Object.assign(node.style, value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    node.append(...children.flat().filter((child) => child !== null && child !== undefined));
    return node;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** Call the booking API with the login cookie. HubOAuth wants the _xsrf token on every
   * fetch(), reads included: it only skips the check for plain page navigation. */
  async function api(method, path, body) {
    const headers = { Accept: "application/json", "X-XSRFToken": xsrfToken };
    const options = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(config.apiUrl + path, options);
    const payload = await response.json().catch(() => null);
    if (!response.ok) {
      const message = payload && payload.message
        ? payload.message
        : `The booking service answered ${response.status} ${response.statusText}; please reload the page.`;
      throw new ApiError(response.status, message);
    }
    return payload;
  }

  const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
    weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit",
  });
  const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
  const dayFormat = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "numeric", month: "short" });

  const parseUtc = (text) => Date.parse(text);
  const toUtcIso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
  const floorSlot = (ms) => Math.floor(ms / SLOT_MS) * SLOT_MS;
  const roundSlot = (ms) => Math.round(ms / SLOT_MS) * SLOT_MS;
  const sameDay = (a, b) => new Date(a).toDateString() === new Date(b).toDateString();

  function formatTime(ms) {
    return dateTimeFormat.format(ms);
  }

  function formatSpan(startMs, endMs) {
    const end = sameDay(startMs, endMs - 1) ? timeFormat.format(endMs) : dateTimeFormat.format(endMs);
    return `${dateTimeFormat.format(startMs)} – ${end}`;
  }

  /** datetime-local inputs hold local wall time without a zone. */
  function toLocalInput(ms) {
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  /** Local input value -> epoch ms on the (UTC) slot grid, or null when empty or invalid. */
  function fromLocalInput(input) {
    const ms = new Date(input.value).getTime();
    return Number.isNaN(ms) ? null : roundSlot(ms);
  }

  function gcd(a, b) {
    return b === 0 ? a : gcd(b, a % b);
  }

  /** "1/4 GPU", "1 GPU", "2 GPUs": amounts shown as exact fractions of the pool's slices. */
  function formatGpus(gpus, slicesPerGpu = 1) {
    const slices = Math.round(gpus * slicesPerGpu);
    const divisor = gcd(slices, slicesPerGpu);
    const numerator = slices / divisor;
    const denominator = slicesPerGpu / divisor;
    if (denominator === 1) return `${numerator} GPU${numerator === 1 ? "" : "s"}`;
    return `${numerator}/${denominator} GPU`;
  }

  function slicesOf(poolName) {
    const pool = page.poolsByName.get(poolName);
    return pool ? pool.slices_per_gpu : 1;
  }

  /** Pool nodes as [name, gpu count] pairs. */
  function poolNodes(pool) {
    return Object.entries(pool.nodes);
  }

  /** Amounts the pool can give: each slice step below one GPU, then whole GPUs up to a node's size. */
  function amountChoices(pool) {
    const choices = [];
    for (let k = 1; k < pool.slices_per_gpu; k++) choices.push(k / pool.slices_per_gpu);
    const largestNode = Math.max(...poolNodes(pool).map(([, count]) => count));
    for (let n = 1; n <= largestNode; n++) choices.push(n);
    return choices;
  }

  function showAlert(box, kind, message) {
    box.className = `alert alert-${kind} ${box.id === "gb-form-feedback" ? "mt-3 mb-0" : ""}`;
    box.replaceChildren(message);
  }

  function hideAlert(box) {
    box.classList.add("d-none");
    box.replaceChildren();
  }

  /** Run a write action; report success or the API's refusal in the given alert box. */
  async function act(box, action, successMessage) {
    try {
      const result = await action();
      showAlert(box, "success", typeof successMessage === "function" ? successMessage(result) : successMessage);
      await refresh();
      return result;
    } catch (error) {
      showAlert(box, "danger", error.message);
      return null;
    }
  }

  // ---------------------------------------------------------------- timeline

  function freeLevel(freeGpus, totalGpus) {
    if (freeGpus <= 0) return "none";
    if (freeGpus >= totalGpus) return "all";
    return freeGpus * 2 >= totalGpus ? "most" : "few";
  }

  function position(startMs, endMs) {
    const { start, end } = page.range;
    const span = end - start;
    const left = Math.max(0, (startMs - start) / span) * 100;
    const right = Math.min(1, (endMs - start) / span) * 100;
    return { left: `${left}%`, width: `${Math.max(0, right - left)}%` };
  }

  /** Axis marks at local midnights, or every few hours when the view spans three days or less. */
  function axisTicks() {
    const { start, end } = page.range;
    const days = (end - start) / DAY_MS;
    const everyHours = days <= 1 ? 2 : days <= 3 ? 6 : 24;
    const tick = new Date(start);
    tick.setHours(Math.floor(tick.getHours() / everyHours) * everyHours, 0, 0, 0);
    const ticks = [];
    for (; tick.getTime() < end; tick.setHours(tick.getHours() + everyHours)) {
      if (tick.getTime() > start) {
        const label = tick.getHours() === 0 ? dayFormat.format(tick) : timeFormat.format(tick);
        ticks.push({ at: tick.getTime(), label });
      }
    }
    return ticks;
  }

  function segmentLabel(pool, interval) {
    const free = formatGpus(interval.free_gpus, pool.slices_per_gpu).replace(/ GPUs?$/, "");
    const bookable = formatGpus(interval.largest_bookable, pool.slices_per_gpu);
    return `${pool.display_name}, ${formatSpan(parseUtc(interval.start), parseUtc(interval.end))}: `
      + `${free} of ${pool.total_gpus} GPU${pool.total_gpus === 1 ? "" : "s"} free, at most ${bookable} bookable at once.`;
  }

  function describeSegment(event) {
    $("gb-timeline-detail").textContent = event.currentTarget.getAttribute("aria-label");
  }

  /** Arrow keys move between the stretches of one bar, so Tab moves between pools (roving tabindex). */
  function moveWithinTrack(event) {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!step) return;
    const segments = [...event.currentTarget.parentElement.querySelectorAll(".gb-seg")];
    const next = segments[segments.indexOf(event.currentTarget) + step];
    if (!next) return;
    event.preventDefault();
    segments.forEach((segment) => segment.setAttribute("tabindex", "-1"));
    next.setAttribute("tabindex", "0");
    next.focus();
  }

  function chooseSegment(pool, interval, event) {
    const now = Date.now();
    const start = Math.max(parseUtc(interval.start), floorSlot(now));
    const end = Math.min(parseUtc(interval.end), start + HOUR_MS);
    fillBookingForm(pool.name, start, Math.max(end, start + SLOT_MS), interval.largest_bookable);
    document.querySelectorAll(".gb-seg.gb-selected").forEach((s) => s.classList.remove("gb-selected"));
    event.currentTarget.classList.add("gb-selected");
    $("gb-amount").focus();
  }

  function renderPoolRow(pool, availability) {
    const track = el("div", { class: "gb-track", role: "group", "aria-label": `Free GPUs in ${pool.display_name}` });
    availability.intervals.forEach((interval, index) => {
      const label = segmentLabel(pool, interval);
      track.append(el("button", {
        type: "button",
        class: `gb-seg gb-level-${freeLevel(interval.free_gpus, pool.total_gpus)}`,
        style: position(parseUtc(interval.start), parseUtc(interval.end)),
        tabindex: index === 0 ? "0" : "-1",
        title: label,
        "aria-label": label,
        dataset: { start: interval.start, end: interval.end, free: interval.free_gpus },
        onmouseenter: describeSegment,
        onfocus: describeSegment,
        onkeydown: moveWithinTrack,
        onclick: (event) => chooseSegment(pool, interval, event),
      }));
    });
    axisTicks().forEach((tick) => track.append(el("span", { class: "gb-tick", style: position(tick.at, tick.at) })));

    const mine = el("div", { class: "gb-mine-track", role: "list", "aria-label": `Your bookings in ${pool.display_name}` });
    for (const booking of page.myBookings) {
      if (booking.pool !== pool.name || !ACTIVE_STATES.has(booking.state)) continue;
      const label = `Your booking: ${formatGpus(booking.gpus, pool.slices_per_gpu)}, `
        + formatSpan(parseUtc(booking.start), parseUtc(booking.end));
      mine.append(el("span", {
        class: "gb-mine", role: "listitem", title: label, "aria-label": label,
        style: position(parseUtc(booking.start), parseUtc(booking.end)),
        dataset: { bookingId: booking.id },
      }));
    }
    const details = [pool.gpu_model, `${pool.total_gpus} GPU${pool.total_gpus === 1 ? "" : "s"}`, pool.backend !== "whole" ? `shared (${pool.backend})` : null];
    return el("div", { class: "gb-pool-row", dataset: { pool: pool.name } },
      el("div", { class: "gb-pool-label" },
        el("strong", {}, pool.display_name), el("br"),
        el("span", { class: "small text-body-secondary" }, details.filter(Boolean).join(" · "))),
      track, el("div"), mine);
  }

  function renderAxis() {
    const axis = el("div", { class: "gb-axis", "aria-hidden": "true" });
    axisTicks().forEach((tick) => axis.append(el("span", { class: "gb-tick", style: position(tick.at, tick.at) }, tick.label)));
    return el("div", { class: "gb-pool-row" }, el("div"), axis);
  }

  function fillRangeChoices() {
    const days = [...new Set([1, 3, config.pageDays])].filter((n) => n <= config.pageDays);
    const select = $("gb-range");
    select.replaceChildren(...days.map((n) => el("option", { value: String(n) }, n === 1 ? "24 hours" : `${n} days`)));
    select.value = String(config.pageDays);
    select.addEventListener("change", () => loadTimeline().catch((error) => showLoadError(error)));
  }

  async function loadTimeline() {
    const start = floorSlot(Date.now());
    page.range = { start, end: start + Number($("gb-range").value) * DAY_MS };
    const query = `start=${encodeURIComponent(toUtcIso(page.range.start))}&end=${encodeURIComponent(toUtcIso(page.range.end))}`;
    const availabilities = await Promise.all(page.pools.map(
      (pool) => api("GET", `pools/${encodeURIComponent(pool.name)}/availability?${query}`)));
    const timeline = $("gb-timeline");
    timeline.replaceChildren(renderAxis(), ...page.pools.map((pool, i) => renderPoolRow(pool, availabilities[i])));
    timeline.setAttribute("aria-busy", "false");
  }

  // ---------------------------------------------------------------- booking form

  function fillAmounts(pool, preferred) {
    const select = $("gb-amount");
    const previous = preferred ?? Number(select.value || 1);
    const choices = amountChoices(pool);
    select.replaceChildren(...choices.map((amount) => el("option", { value: String(amount) }, formatGpus(amount, pool.slices_per_gpu))));
    // keep the user's choice if the pool offers it, else the largest choice not above it
    const fitting = choices.filter((amount) => amount <= previous + 1e-9);
    select.value = String(fitting.length ? fitting[fitting.length - 1] : choices[0]);
    const nodeSizes = poolNodes(pool).map(([node, count]) => `${node}: ${count}`).join(", ");
    $("gb-pool-help").textContent = [pool.gpu_model, pool.gpu_memory_mib ? `${Math.round(pool.gpu_memory_mib / 1024)} GiB each` : null,
      `GPUs per node: ${nodeSizes}`].filter(Boolean).join(" · ");
  }

  function fillBookingForm(poolName, startMs, endMs, preferredAmount) {
    $("gb-pool").value = poolName;
    fillAmounts(page.poolsByName.get(poolName), preferredAmount);
    $("gb-start").value = toLocalInput(startMs);
    $("gb-end").value = toLocalInput(endMs);
  }

  /** Keep form times on the slot grid as the user types, so what is sent is what is shown. */
  function snapInput(event) {
    const ms = fromLocalInput(event.currentTarget);
    if (ms !== null) event.currentTarget.value = toLocalInput(ms);
  }

  async function submitBooking(event) {
    event.preventDefault();
    const box = $("gb-form-feedback");
    const start = fromLocalInput($("gb-start"));
    const end = fromLocalInput($("gb-end"));
    if (start === null || end === null) {
      showAlert(box, "danger", "Choose both a start and an end time.");
      return;
    }
    const pool = page.poolsByName.get($("gb-pool").value);
    const gpus = Number($("gb-amount").value);
    const button = $("gb-book-button");
    button.disabled = true;
    await act(box,
      () => api("POST", "bookings", { pool: pool.name, gpus, start: toUtcIso(start), end: toUtcIso(end), note: $("gb-note").value }),
      (booking) => `Booked ${formatGpus(booking.gpus, pool.slices_per_gpu)} in ${pool.display_name}, `
        + `${formatSpan(parseUtc(booking.start), parseUtc(booking.end))}.`);
    button.disabled = false;
  }

  // ---------------------------------------------------------------- booking tables

  function bookingRow(booking, { showUser, cancelLabel, box }) {
    const slices = slicesOf(booking.pool);
    const start = parseUtc(booking.start);
    const end = parseUtc(booking.end);
    const pool = page.poolsByName.get(booking.pool);
    const where = booking.placement
      ? `${booking.placement.node} GPU ${booking.placement.gpus.join(", ")}` : "";
    const actions = el("div", { class: "gb-actions" });
    if (ACTIVE_STATES.has(booking.state)) {
      const span = `${formatGpus(booking.gpus, slices)} in ${pool ? pool.display_name : booking.pool}`;
      actions.append(el("button", {
        type: "button", class: "btn btn-sm btn-outline-danger",
        "aria-label": `${cancelLabel} booking ${booking.id} (${span})`,
        onclick: () => {
          if (!window.confirm(`${cancelLabel} the booking of ${span}, ${formatSpan(start, end)}?`)) return;
          act(box, () => api("DELETE", `bookings/${booking.id}`), `Booking ${booking.id} is cancelled.`);
        },
      }, cancelLabel));
      if (!showUser) actions.append(...extendControls(booking, box));
    }
    const cells = [
      showUser ? el("td", {}, booking.user) : null,
      el("td", {}, pool ? pool.display_name : booking.pool),
      el("td", {}, formatGpus(booking.gpus, slices)),
      el("td", {}, el("time", { datetime: booking.start }, formatTime(start))),
      el("td", {}, el("time", { datetime: booking.end }, formatTime(end))),
      el("td", {}, booking.state, booking.server !== null && booking.server !== undefined
        ? el("div", { class: "small text-body-secondary" }, `in use by server "${booking.server || "default"}"`) : null),
      el("td", { class: "small" }, where),
      el("td", { class: "small" }, booking.note || ""),
      el("td", {}, actions),
    ];
    return el("tr", { dataset: { bookingId: booking.id, state: booking.state } }, ...cells);
  }

  function extendControls(booking, box) {
    const end = parseUtc(booking.end);
    const plusSlot = el("button", {
      type: "button", class: "btn btn-sm btn-outline-secondary",
      "aria-label": `Extend booking ${booking.id} by ${config.slotMinutes} minutes`,
      onclick: () => changeEnd(booking, end + SLOT_MS, box),
    }, `+${config.slotMinutes} min`);
    const input = el("input", {
      type: "datetime-local", class: "form-control form-control-sm", required: true,
      value: toLocalInput(end + HOUR_MS), id: `gb-new-end-${booking.id}`, onchange: snapInput,
    });
    const form = el("form", {
      onsubmit: (event) => {
        event.preventDefault();
        const newEnd = fromLocalInput(input);
        if (newEnd === null) showAlert(box, "danger", "Choose the new end time.");
        else changeEnd(booking, newEnd, box);
      },
    }, el("label", { class: "visually-hidden", for: input.id }, `New end of booking ${booking.id}`), input,
    el("button", { type: "submit", class: "btn btn-sm btn-primary" }, "Save"));
    return [plusSlot, el("details", {}, el("summary", { class: "btn btn-sm btn-outline-secondary" }, "New end…"), form)];
  }

  function changeEnd(booking, endMs, box) {
    return act(box, () => api("PATCH", `bookings/${booking.id}`, { end: toUtcIso(endMs) }),
      (updated) => `Booking ${booking.id} now ends ${formatTime(parseUtc(updated.end))}.`);
  }

  function renderBookingTable(container, bookings, options) {
    if (!bookings.length) {
      container.replaceChildren(el("p", { class: "text-body-secondary" }, options.emptyText));
      return;
    }
    const headings = [options.showUser ? "User" : null, "Pool", "GPUs", "Start", "End", "State", "Where", "Note", "Actions"];
    container.replaceChildren(el("div", { class: "table-responsive" },
      el("table", { class: "table table-sm gb-table" },
        el("caption", { class: "visually-hidden" }, options.caption),
        el("thead", {}, el("tr", {}, headings.filter(Boolean).map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, bookings.map((booking) => bookingRow(booking, options))))));
  }

  const byStart = (a, b) => parseUtc(a.start) - parseUtc(b.start);

  async function loadMyBookings() {
    const bookings = await api("GET", `bookings?user=${encodeURIComponent(config.user)}`);
    page.myBookings = bookings.sort(byStart);
  }

  function renderMyBookings() {
    const showPast = $("gb-mine-show-past").checked;
    renderBookingTable($("gb-my-bookings"), page.myBookings.filter((b) => showPast || ACTIVE_STATES.has(b.state)), {
      showUser: false, cancelLabel: "Cancel", box: $("gb-mine-feedback"),
      caption: "My bookings", emptyText: "You have no upcoming or active bookings.",
    });
  }

  // ---------------------------------------------------------------- calendar feed

  async function loadFeed(reset) {
    const feed = await api(reset ? "POST" : "GET", `users/${encodeURIComponent(config.user)}/feed-token`);
    $("gb-feed-url").value = new URL(feed.url, window.location.href).href;
  }

  /** The service keeps only a hash of the link, so it can show it once; after that, say so. */
  async function showFeedOnce() {
    try {
      await loadFeed(false);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 409)) throw error;
      $("gb-feed-url").placeholder = "Link hidden: reset it to get a new one";
      $("gb-feed-feedback").textContent = error.message;
    }
  }

  function wireFeed() {
    const status = $("gb-feed-feedback");
    $("gb-feed-copy").addEventListener("click", async () => {
      $("gb-feed-url").select();
      try {
        await navigator.clipboard.writeText($("gb-feed-url").value);
        status.textContent = "Link copied.";
      } catch {
        status.textContent = "Copying is blocked here; the link is selected, copy it with Ctrl+C.";
      }
    });
    $("gb-feed-reset").addEventListener("click", async () => {
      if (!window.confirm("Reset the calendar link? Calendars subscribed to the old link stop updating.")) return;
      try {
        await loadFeed(true);
        status.textContent = "New link created; the old one no longer works.";
      } catch (error) {
        status.textContent = error.message;
      }
    });
  }

  // ---------------------------------------------------------------- administration

  async function loadAdmin() {
    const [bookings, windows] = await Promise.all([api("GET", "bookings"), api("GET", "maintenance")]);
    const showPast = $("gb-all-show-past").checked;
    renderBookingTable($("gb-all-bookings"), bookings.sort(byStart).filter((b) => showPast || ACTIVE_STATES.has(b.state)), {
      showUser: true, cancelLabel: "Force cancel", box: $("gb-admin-feedback"),
      caption: "All bookings", emptyText: "No upcoming or active bookings.",
    });
    renderMaintenance(windows);
  }

  function renderMaintenance(windows) {
    const container = $("gb-maintenance-list");
    if (!windows.length) {
      container.replaceChildren(el("p", { class: "text-body-secondary" }, "No maintenance windows."));
      return;
    }
    const rows = windows.sort(byStart).map((maintenanceWindow) => el("tr", { dataset: { windowId: maintenanceWindow.id } },
      el("td", {}, page.poolsByName.get(maintenanceWindow.pool)?.display_name ?? maintenanceWindow.pool),
      el("td", {}, maintenanceWindow.node || "whole pool"),
      el("td", {}, formatSpan(parseUtc(maintenanceWindow.start), parseUtc(maintenanceWindow.end))), el("td", {}, maintenanceWindow.reason || ""),
      el("td", {}, el("button", {
        type: "button", class: "btn btn-sm btn-outline-danger",
        "aria-label": `Delete maintenance window ${maintenanceWindow.id}`,
        onclick: () => act($("gb-admin-feedback"), () => api("DELETE", `maintenance/${maintenanceWindow.id}`),
          `Maintenance window ${maintenanceWindow.id} is deleted.`),
      }, "Delete"))));
    container.replaceChildren(el("table", { class: "table table-sm gb-table" },
      el("caption", { class: "visually-hidden" }, "Maintenance windows"),
      el("thead", {}, el("tr", {}, ["Pool", "Node", "When", "Reason", "Actions"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows)));
  }

  function fillNodes() {
    const pool = page.poolsByName.get($("gb-mw-pool").value);
    $("gb-mw-node").replaceChildren(el("option", { value: "" }, "whole pool"),
      ...poolNodes(pool).map(([node]) => el("option", { value: node }, node)));
  }

  async function submitMaintenance(event) {
    event.preventDefault();
    const box = $("gb-admin-feedback");
    const start = fromLocalInput($("gb-mw-start"));
    const end = fromLocalInput($("gb-mw-end"));
    if (start === null || end === null) {
      showAlert(box, "danger", "Choose both a start and an end time for the maintenance window.");
      return;
    }
    const body = {
      pool: $("gb-mw-pool").value, node: $("gb-mw-node").value || null,
      start: toUtcIso(start), end: toUtcIso(end), reason: $("gb-mw-reason").value,
    };
    const created = await act(box, () => api("POST", "maintenance", body),
      (maintenanceWindow) => `Maintenance window ${maintenanceWindow.id} is created; ${maintenanceWindow.colliding_bookings.length} booking(s) overlap it.`);
    if (created) renderCollisions(created.colliding_bookings);
  }

  function renderCollisions(colliding) {
    const container = $("gb-collisions");
    if (!colliding.length) {
      container.replaceChildren();
      return;
    }
    const table = el("div", { id: "gb-collision-table" });
    renderBookingTable(table, colliding.sort(byStart), {
      showUser: true, cancelLabel: "Force cancel", box: $("gb-admin-feedback"),
      caption: "Bookings overlapping the new maintenance window", emptyText: "",
    });
    container.replaceChildren(el("h4", { class: "h6" }, "Bookings overlapping the new window"), table);
  }

  // ---------------------------------------------------------------- start-up

  async function refresh() {
    await loadMyBookings();
    renderMyBookings();
    await loadTimeline();
    if (config.isAdmin) await loadAdmin();
  }

  function showLoadError(error) {
    const box = $("gb-load-error");
    box.textContent = `The booking page could not load: ${error.message}`;
    box.classList.remove("d-none");
  }

  async function start() {
    $("gb-time-zone").textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    page.pools = await api("GET", "pools");
    page.poolsByName = new Map(page.pools.map((pool) => [pool.name, pool]));
    if (!page.pools.length) {
      $("gb-timeline").replaceChildren(el("p", {}, "No GPU pools are configured yet."));
      $("gb-booking-form").hidden = true;
      return;
    }
    const poolOptions = () => page.pools.map((pool) => el("option", { value: pool.name }, pool.display_name));
    $("gb-pool").replaceChildren(...poolOptions());
    $("gb-pool").addEventListener("change", () => fillAmounts(page.poolsByName.get($("gb-pool").value)));
    // the running slot is still bookable ("book now")
    const firstStart = floorSlot(Date.now());
    fillBookingForm(page.pools[0].name, firstStart, firstStart + HOUR_MS, 1);
    for (const id of ["gb-start", "gb-end", "gb-mw-start", "gb-mw-end"]) $(id)?.addEventListener("change", snapInput);
    $("gb-booking-form").addEventListener("submit", submitBooking);
    fillRangeChoices();
    $("gb-mine-show-past").addEventListener("change", renderMyBookings);
    wireFeed();
    if (config.isAdmin) {
      $("gb-mw-pool").replaceChildren(...poolOptions());
      $("gb-mw-pool").addEventListener("change", fillNodes);
      fillNodes();
      $("gb-mw-start").value = toLocalInput(firstStart);
      $("gb-mw-end").value = toLocalInput(firstStart + 2 * HOUR_MS);
      $("gb-maintenance-form").addEventListener("submit", submitMaintenance);
      $("gb-all-show-past").addEventListener("change", loadAdmin);
    }
    await Promise.all([refresh(), showFeedOnce()]);
  }

  document.addEventListener("DOMContentLoaded", () => {
    start().catch(showLoadError);
  });
})();
