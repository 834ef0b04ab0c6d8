// Reservation page of jhub-gpubooking (an ES module; plain browser JS, no build step).
// The server renders the config (API URL, user, slot grid) and the XSRF token into the page;
// everything else comes from the REST API, which holds all the rules: the page shows its
// refusal messages as they are, next to the control that caused them.

import {
  $, ACTIVE_STATES, DAY_MS, HOUR_MS, NewestLoad, PagedList, SLOT_MS, amountChoices, api, byStart, config, el,
  floorSlot, formatGpus, formatSpan, formatTime, fromLocalInput, isActing, keepFresh, oneAtATime, parseUtc,
  plural, snapInput, toLocalInput, toUtcIso,
} from "./common.js";
import { cancelSeriesButton, loadBudget, seriesBadge, seriesChoice, wireRepeatChoice } from "./planning.js";
import { renderTimeline } from "./timeline.js";
import { hideWaitlistOffer, loadMyWaits, offerWaitlist } from "./waitlist.js";

const page = {
  pools: [], poolsByName: new Map(), myBookings: [],
  // lists the API pages; the tables show what is loaded and offer the next page
  mine: new PagedList("bookings", "bookings"),
  all: new PagedList("bookings", "bookings"),
  windows: new PagedList("maintenance", "windows"),
  // the views loaded in one piece; see NewestLoad
  loads: { timeline: new NewestLoad(), notices: new NewestLoad(), holders: new NewestLoad(), report: new NewestLoad() },
};

function showAlert(box, kind, message) {
  box.classList.remove("d-none", "alert-success", "alert-danger");
  box.classList.add(`alert-${kind}`);
  box.replaceChildren(message);
}

/** Run a write action; report success or the API's refusal in the given alert box
 * (`onRefusal` then gets the error too, e.g. to offer what the refusal suggests). The page is
 * refreshed after a success; a refresh that fails is reported as the page's, not as the action's
 * (the booking was made even if the list showing it could not be read just then). */
async function act(box, action, successMessage, onRefusal) {
  let result;
  try {
    result = await action();
  } catch (error) {
    showAlert(box, "danger", error.message);
    if (onRefusal) onRefusal(error);
    return null;
  }
  showAlert(box, "success", typeof successMessage === "function" ? successMessage(result) : successMessage);
  await refreshOrReport();
  return result;
}

function poolName(name) {
  return page.poolsByName.get(name)?.display_name ?? name;
}

function slicesOf(name) {
  return page.poolsByName.get(name)?.slices_per_gpu ?? 1;
}

// ---------------------------------------------------------------- timeline

function fillRangeChoices() {
  const days = [...new Set([1, 3, config.pageDays])].filter((n) => n <= config.pageDays);
  const select = $("gb-range");
  select.replaceChildren(...days.map((n) => el("option", { value: String(n) }, n === 1 ? "24 hours" : `${n} days`)));
  select.value = String(config.pageDays);
  select.addEventListener("change", () => loadTimeline().catch(showLoadError));
}

function chooseStretch(pool, interval) {
  const start = Math.max(parseUtc(interval.start), floorSlot(Date.now()));
  const end = Math.min(parseUtc(interval.end), start + HOUR_MS);
  fillBookingForm(pool.name, start, Math.max(end, start + SLOT_MS), interval.largest_bookable);
  $("gb-amount").focus();
}

/** `mayDraw` (an automatic refresh's) says whether the answer may still be drawn. */
async function loadTimeline(mayDraw = () => true) {
  const isNewest = page.loads.timeline.begin();
  const start = floorSlot(Date.now());
  const range = { start, end: start + Number($("gb-range").value) * DAY_MS };
  const query = new URLSearchParams({ start: toUtcIso(range.start), end: toUtcIso(range.end) });
  const availabilities = await Promise.all(page.pools.map(
    (pool) => api("GET", `pools/${encodeURIComponent(pool.name)}/availability?${query}`)));
  if (!isNewest() || !mayDraw()) return; // another range chosen, or the user now works in it
  renderTimeline($("gb-timeline"), {
    pools: page.pools, availabilities, myBookings: page.myBookings, range,
    detail: $("gb-timeline-detail"), onChoose: chooseStretch,
  });
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
  const nodeSizes = Object.entries(pool.nodes).map(([node, count]) => `${node}: ${count}`).join(", ");
  $("gb-pool-help").textContent = [pool.gpu_model, pool.gpu_memory_mib ? `${Math.round(pool.gpu_memory_mib / 1024)} GiB each` : null,
    `GPUs per node: ${nodeSizes}`].filter(Boolean).join(" · ");
}

function fillBookingForm(name, startMs, endMs, preferredAmount) {
  $("gb-pool").value = name;
  fillAmounts(page.poolsByName.get(name), preferredAmount);
  $("gb-start").value = toLocalInput(startMs);
  $("gb-end").value = toLocalInput(endMs);
}

const bookedMessage = (pool) => (booking) => `Booked ${formatGpus(booking.gpus, pool.slices_per_gpu)} in `
  + `${pool.display_name}, ${formatSpan(parseUtc(booking.start), parseUtc(booking.end))}.`;

function hideNextFree() {
  const holder = $("gb-next-free");
  holder.replaceChildren();
  holder.classList.add("d-none");
}

/** A capacity refusal names the earliest free interval of the same length and amount
 * (`next_free`): offer to book exactly that, in one click, with the rest of the request kept. */
function offerNextFree(request, pool, error) {
  const free = error.payload?.next_free;
  if (!free) return;
  const holder = $("gb-next-free");
  const button = el("button", {
    type: "button", class: "btn btn-jupyter btn-outline-primary btn-sm", id: "gb-next-free-button",
    onclick: oneAtATime(async () => {
      hideNextFree();
      const moved = { ...request, start: free.start, end: free.end };
      // taken meanwhile? the new refusal offers the next interval again
      const booking = await act($("gb-form-feedback"), () => api("POST", "bookings", moved),
        bookedMessage(pool), (again) => offerNextFree(moved, pool, again));
      if (booking) fillBookingForm(pool.name, parseUtc(booking.start), parseUtc(booking.end), booking.gpus);
    }),
  }, `Book ${formatSpan(parseUtc(free.start), parseUtc(free.end))} instead`);
  holder.replaceChildren(button);
  holder.classList.remove("d-none");
}

async function submitBooking() {
  hideNextFree();
  hideWaitlistOffer();
  const box = $("gb-form-feedback");
  const start = fromLocalInput($("gb-start"));
  const end = fromLocalInput($("gb-end"));
  if (start === null || end === null) {
    showAlert(box, "danger", "Choose both a start and an end time.");
    return;
  }
  const pool = page.poolsByName.get($("gb-pool").value);
  const gpus = Number($("gb-amount").value);
  const request = { pool: pool.name, gpus, start: toUtcIso(start), end: toUtcIso(end), note: $("gb-note").value };
  const series = seriesChoice();
  if (series) {
    await act(box, () => api("POST", "series", { ...request, ...series }),
      (created) => `Booked ${plural(created.bookings.length, "occurrence")} of series ${created.id}.`);
    return;
  }
  await act(box, () => api("POST", "bookings", request), bookedMessage(pool), (error) => {
    offerNextFree(request, pool, error);
    // no capacity: the request may also wait for it (waitlist.js)
    if (error.status === 409) offerWaitlist(box, request, act);
  });
}

// ---------------------------------------------------------------- booking tables

function bookingRow(booking, { showUser, cancelLabel, box }) {
  const slices = slicesOf(booking.pool);
  const start = parseUtc(booking.start);
  const end = parseUtc(booking.end);
  const where = booking.placement
    ? `${booking.placement.node} GPU ${booking.placement.gpus.join(", ")}` : "";
  const actions = el("div", { class: "gb-actions" });
  if (ACTIVE_STATES.has(booking.state)) {
    const span = `${formatGpus(booking.gpus, slices)} in ${poolName(booking.pool)}`;
    // an active booking ends now (its server is stopped, the rest is free); an upcoming one is cancelled
    const running = booking.state === "active";
    const label = running ? (showUser ? "Force end now" : "End now") : cancelLabel;
    const question = running
      ? `${label}: end the booking of ${span} now? Its server is stopped and the rest of its time is freed.`
      : `${label} the booking of ${span}, ${formatSpan(start, end)}?`;
    actions.append(el("button", {
      type: "button", class: "btn btn-sm btn-outline-danger",
      "aria-label": `${label} booking ${booking.id} (${span})`,
      onclick: oneAtATime(async () => {
        if (!window.confirm(question)) return;
        await act(box, () => api("DELETE", `bookings/${booking.id}`),
          running ? `Booking ${booking.id} has ended.` : `Booking ${booking.id} is cancelled.`);
      }),
    }, label));
    if (!showUser) actions.append(...extendControls(booking, box));
    if (!showUser && booking.series_id != null) actions.append(cancelSeriesButton(booking, box, act));
  }
  const cells = [
    showUser ? el("td", {}, booking.user) : null,
    el("td", {}, poolName(booking.pool)),
    el("td", {}, formatGpus(booking.gpus, slices)),
    el("td", {}, el("time", { datetime: booking.start }, formatTime(start))),
    el("td", {}, el("time", { datetime: booking.end }, formatTime(end))),
    el("td", {}, booking.state, seriesBadge(booking), booking.server !== null && booking.server !== undefined
      ? el("div", { class: "small text-body-secondary" }, `in use by server "${booking.server || "default"}"`) : null),
    el("td", { class: "small" }, where, booking.placement_provisional
      // an upcoming booking may still move to other GPUs of its pool to let another request in
      ? el("div", { class: "text-body-secondary", title: "It may move to other GPUs of this pool "
        + "until it starts; your server gets the final GPUs." }, "provisional, GPU assigned at start")
      : null),
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
    onclick: oneAtATime(() => changeEnd(booking, end + SLOT_MS, box)),
  }, `+${config.slotMinutes} min`);
  const input = el("input", {
    type: "datetime-local", class: "form-control form-control-sm", required: true,
    value: toLocalInput(end + HOUR_MS), id: `gb-new-end-${booking.id}`, onchange: snapInput,
  });
  const form = el("form", {
    onsubmit: oneAtATime(async () => {
      const newEnd = fromLocalInput(input);
      if (newEnd === null) showAlert(box, "danger", "Choose the new end time.");
      else await changeEnd(booking, newEnd, box);
    }),
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

// ---------------------------------------------------------------- paging of the tables

/** How far back "Show ended and cancelled bookings" reaches (older ones: the calendar feed). */
const PAST_DAYS = 30;

/** The list filter of a table: bookings still running or ahead, or also the recent past. */
function listWindow(showPast) {
  return { start: toUtcIso(floorSlot(Date.now()) - (showPast ? PAST_DAYS * DAY_MS : 0)) };
}

/** A "Show more" button under a table while the API has further pages of its list. */
function moreButton(list, label, render) {
  if (!list.hasMore) return null;
  return el("button", {
    type: "button", class: "btn btn-sm btn-outline-secondary gb-more",
    onclick: () => list.more().then(render).catch(showLoadError),
  }, label);
}

/** Load "My bookings": the first page, or with `keepPages` as many as shown now (a refresh). */
async function loadMyBookings(keepPages = false) {
  const params = { user: config.user, ...listWindow($("gb-mine-show-past").checked) };
  await page.mine.load(params, { keepPages });
}

function renderMyBookings() {
  const showPast = $("gb-mine-show-past").checked;
  page.myBookings = [...page.mine.items].sort(byStart);
  renderBookingTable($("gb-my-bookings"), page.myBookings.filter((b) => showPast || ACTIVE_STATES.has(b.state)), {
    showUser: false, cancelLabel: "Cancel", box: $("gb-mine-feedback"),
    caption: "My bookings", emptyText: "You have no upcoming or active bookings.",
  });
  $("gb-my-bookings").append(moreButton(page.mine, "Show more of my bookings", renderMyBookings) ?? "");
}

// ---------------------------------------------------------------- calendar feed

/** The service keeps only a hash of the link, so it shows a link once, when it is created
 * (a POST, on the user's click): loading the page never creates or burns a link. */
const feed = { exists: false };

function showFeedState() {
  $("gb-feed-create").textContent = feed.exists ? "Reset link" : "Create link";
  $("gb-feed-url").placeholder = feed.exists
    ? "Your link is shown only when created; reset it to get a new one"
    : "No calendar link yet";
}

async function loadFeedState() {
  ({ exists: feed.exists } = await api("GET", `users/${encodeURIComponent(config.user)}/feed-token`));
  showFeedState();
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
  $("gb-feed-create").addEventListener("click", oneAtATime(async () => {
    const reset = feed.exists;
    if (reset && !window.confirm("Reset the calendar link? Calendars subscribed to the old link stop updating.")) return;
    try {
      const created = await api("POST", `users/${encodeURIComponent(config.user)}/feed-token`);
      $("gb-feed-url").value = new URL(created.url, window.location.href).href;
      feed.exists = true;
      showFeedState();
      status.textContent = reset ? "New link created; the old one no longer works."
        : "Link created; copy it now, it is shown only this once.";
    } catch (error) {
      status.textContent = error.message;
    }
  }));
}

// ---------------------------------------------------------------- notices (end warnings, releases)

/** The notices as last drawn: the box is a live region, so drawing the same notices again on
 * every refresh would have screen readers read them out again every time. */
let noticesShown = null;

async function loadNotices() {
  const isNewest = page.loads.notices.begin();
  const { notices } = await api("GET", `users/${encodeURIComponent(config.user)}/notices`);
  const shown = JSON.stringify(notices);
  if (!isNewest() || shown === noticesShown) return;
  noticesShown = shown;
  $("gb-notices").replaceChildren(...notices.map((notice) => el("div", {
    class: `alert ${notice.kind === "ending_soon" ? "alert-warning" : "alert-info"}`,
    dataset: { kind: notice.kind, bookingId: notice.booking_id },
  }, notice.message, notice.kind === "start_early" ? startEarlyButton(notice) : null)));
}

// GPUs free now for a booking later today: one click moves it to start now (same length)
function startEarlyButton(notice) {
  return el("button", {
    type: "button", class: "btn btn-sm btn-primary ms-2",
    "aria-label": `Start booking ${notice.booking_id} now`,
    onclick: oneAtATime(() => act($("gb-mine-feedback"), () => api("POST", `bookings/${notice.booking_id}/start-early`),
      (moved) => `Booking ${moved.id} now runs ${formatSpan(parseUtc(moved.start), parseUtc(moved.end))}.`)),
  }, "Start now");
}

// ---------------------------------------------------------------- administration

function simpleTable(caption, headings, rows) {
  return el("div", { class: "table-responsive" }, el("table", { class: "table table-sm gb-table" },
    el("caption", { class: "visually-hidden" }, caption),
    el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((cell) => el("td", {}, String(cell))))))));
}

async function loadHolders() {
  const isNewest = page.loads.holders.begin();
  const { holders, monitoring } = await api("GET", "admin/holders");
  if (!isNewest()) return;
  // utilisation columns only when Prometheus is configured; a failed query shows "unknown"
  const monitored = monitoring && monitoring !== "off";
  const utilisation = (h) => h.gpu_utilisation === null ? "unknown" : `${h.gpu_utilisation} %`;
  const idle = (h) => h.idle === null ? "unknown" : h.idle ? "idle" : "busy";
  $("gb-holders").replaceChildren(holders.length
    ? simpleTable("GPUs in use now", ["User", "Pool", "GPUs", "Node", "GPU", "Server", "Ends",
      ...(monitored ? ["GPU use", "Idle?"] : [])],
      holders.map((h) => [h.user, poolName(h.pool), h.opportunistic ? `${h.gpus} (opportunistic)` : h.gpus,
        h.node, h.gpu_indices.join(", "),
        h.server === null ? "not running" : h.server || "default", formatTime(parseUtc(h.end)),
        ...(monitored ? [utilisation(h), idle(h)] : [])]))
    : el("p", { class: "text-body-secondary" }, "No booking is active right now."));
}

async function loadReport() {
  const by = $("gb-report-by").value;
  $("gb-report-csv").href = `${config.apiUrl}admin/report?by=${by}&format=csv`;
  const isNewest = page.loads.report.begin();
  const report = await api("GET", `admin/report?by=${by}`);
  if (!isNewest()) return; // another grouping was chosen meanwhile
  const hours = (value) => value.toFixed(2);
  const line = (key, t) => [key, t.bookings, hours(t.booked_gpu_hours), hours(t.used_gpu_hours),
    hours(t.idle_gpu_hours), hours(t.released_gpu_hours), hours(t.no_show_gpu_hours), t.no_shows];
  $("gb-report").replaceChildren(simpleTable("Usage report",
    [by, "Bookings", "Booked", "Used", "Idle", "Released", "No-show", "No-shows"],
    [...report.rows.map((row) => line(row.key, row)), line("total", report.total)]));
}


/** Load the admin's tables: their first pages, or with `keepPages` as many as shown now. */
async function loadAdmin(keepPages = false) {
  const since = listWindow($("gb-all-show-past").checked);
  // maintenance windows still running or ahead; past ones no longer block anything
  const lists = [[page.all, since], [page.windows, listWindow(false)]];
  await Promise.all(lists.map(([list, params]) => list.load(params, { keepPages })));
  renderAllBookings();
  renderMaintenance();
}

function renderAllBookings() {
  const showPast = $("gb-all-show-past").checked;
  renderBookingTable($("gb-all-bookings"), [...page.all.items].sort(byStart).filter((b) => showPast || ACTIVE_STATES.has(b.state)), {
    showUser: true, cancelLabel: "Force cancel", box: $("gb-admin-feedback"),
    caption: "All bookings", emptyText: "No upcoming or active bookings.",
  });
  $("gb-all-bookings").append(moreButton(page.all, "Show more bookings", renderAllBookings) ?? "");
}

function renderMaintenance() {
  renderMaintenanceTable(page.windows.items);
  $("gb-maintenance-list").append(moreButton(page.windows, "Show more maintenance windows", renderMaintenance) ?? "");
}

function renderMaintenanceTable(windows) {
  const container = $("gb-maintenance-list");
  if (!windows.length) {
    container.replaceChildren(el("p", { class: "text-body-secondary" }, "No maintenance windows."));
    return;
  }
  const rows = [...windows].sort(byStart).map((block) => el("tr", { dataset: { windowId: block.id } },
    el("td", {}, poolName(block.pool)),
    el("td", {}, block.node || "whole pool"),
    el("td", {}, formatSpan(parseUtc(block.start), parseUtc(block.end))),
    el("td", {}, block.reason || ""),
    el("td", {}, el("button", {
      type: "button", class: "btn btn-sm btn-outline-danger",
      "aria-label": `Delete maintenance window ${block.id}`,
      onclick: oneAtATime(() => act($("gb-admin-feedback"), () => api("DELETE", `maintenance/${block.id}`),
        `Maintenance window ${block.id} is deleted.`)),
    }, "Delete"))));
  container.replaceChildren(el("table", { class: "table table-sm gb-table" },
    el("caption", { class: "visually-hidden" }, "Maintenance windows"),
    el("thead", {}, el("tr", {}, ["Pool", "Node", "When", "Reason", "Actions"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows)));
}

function fillNodes() {
  const pool = page.poolsByName.get($("gb-mw-pool").value);
  $("gb-mw-node").replaceChildren(el("option", { value: "" }, "whole pool"),
    ...Object.keys(pool.nodes).map((node) => el("option", { value: node }, node)));
}

async function submitMaintenance() {
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
  const created = await act(box, () => api("POST", "maintenance", body), (block) => {
    const count = block.colliding_bookings.length;
    return `Maintenance window ${block.id} is created; ${plural(count, "booking")} `
      + `${count === 1 ? "overlaps" : "overlap"} it.`;
  });
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

/** Load every view again: after an action, and `auto`matically every `refreshSeconds` while the
 * page is open. An automatic refresh draws nothing the user began to work in while its answers
 * were on their way (a "New end…" opened meanwhile would snap shut). */
async function refresh({ auto = false } = {}) {
  const mayDraw = () => !auto || !userIsEditing();
  await loadMyBookings(true);
  if (mayDraw()) renderMyBookings();
  await loadMyWaits($("gb-mine-feedback"), act, poolName, slicesOf);
  await loadBudget();
  await loadTimeline(mayDraw);
  await loadNotices();
  if (config.isAdmin) await Promise.all([loadAdmin(true), loadHolders(), loadReport()]);
}

/** Whether the user is working in what a refresh draws again: a "New end…" open in "My
 * bookings" (maybe half typed; everyone's bookings have none), or a keyboard user moving along the timeline. A focused button does not
 * count: one that keeps the focus after a refusal would stop the refreshes until the user
 * clicked elsewhere. */
function userIsEditing() {
  return $("gb-timeline").contains(document.activeElement)
    || $("gb-my-bookings").querySelector("details[open]") !== null;
}

/** Refresh, and say so on the page when that fails (the service or its database may be down
 * for a while: the page keeps trying, and the message goes once a refresh works again). */
async function refreshOrReport(options) {
  try {
    await refresh(options);
    $("gb-load-error").classList.add("d-none");
  } catch (error) {
    showLoadError(error, "could not refresh");
  }
}

function showLoadError(error, what = "could not load") {
  const box = $("gb-load-error");
  // 403 on a read: the login ran out (or the user's rights changed) while the page was open;
  // loading the page again goes through the Hub's login and back
  const reload = error.status === 403
    ? el("a", { href: window.location.href, class: "alert-link ms-1" }, "Reload the page") : null;
  box.replaceChildren(`The booking page ${what}: ${error.message}`, reload ?? "");
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
  $("gb-booking-form").addEventListener("submit", oneAtATime(submitBooking));
  wireRepeatChoice();
  fillRangeChoices();
  $("gb-mine-show-past").addEventListener("change", () => loadMyBookings().then(renderMyBookings).catch(showLoadError));
  wireFeed();
  if (config.isAdmin) {
    $("gb-mw-pool").replaceChildren(...poolOptions());
    $("gb-mw-pool").addEventListener("change", fillNodes);
    fillNodes();
    $("gb-mw-start").value = toLocalInput(firstStart);
    $("gb-mw-end").value = toLocalInput(firstStart + 2 * HOUR_MS);
    $("gb-maintenance-form").addEventListener("submit", oneAtATime(submitMaintenance));
    $("gb-all-show-past").addEventListener("change", () => loadAdmin().catch(showLoadError));
    $("gb-report-by").addEventListener("change", () => loadReport().catch(showLoadError));
  }
  // started before the first load, so a page opened while the service is down recovers by itself
  // (an action on its way refreshes the page itself when it is done)
  keepFresh(() => refreshOrReport({ auto: true }), {
    seconds: config.refreshSeconds, isBusy: () => isActing() || userIsEditing(),
  });
  await Promise.all([refresh(), loadFeedState()]);
}

start().catch(showLoadError);
