// Reservation page of jhub-gpubooking (an ES module; plain browser JS, no build step).
// The server renders the config (API URL, user, slot grid) and the XSRF token into the page;
// everything else comes from the REST API, which holds all the rules: the page shows its
// refusal messages as they are, next to the control that caused them.

import {
  $, ACTIVE_STATES, DAY_MS, HOUR_MS, NewestLoad, PagedList, SLOT_MS, amountChoices, api, byStart, config,
  bookableLimit, createOnce, drawUnlessShown, el, floorSlot, formatGpus, formatSpan, fromLocalInput, isActing, keepFresh,
  oneAtATime, parseUtc, plural, serverSentence, snapInput, toLocalInput, toUtcIso,
} from "./common.js";
import { refreshAdmin, wireAdmin } from "./admin.js";
import { act, page, refreshOrReport, setRefresh, showAlert, showLoadError } from "./page.js";
import { loadBudget, seriesChoice, wireRepeatChoice } from "./planning.js";
import { listWindow, moreButton, renderBookingTable } from "./tables.js";
import { renderTimeline } from "./timeline.js";
import { hideWaitlistOffer, loadMyWaits, offerWaitlist } from "./waitlist.js";

// "My bookings", a list the API pages: the table shows what is loaded and offers the next page
const mine = new PagedList("bookings", "bookings");
let myBookings = []; // as shown, in order of start: the timeline marks them too
// the views loaded in one piece; see NewestLoad
const loads = { timeline: new NewestLoad(), notices: new NewestLoad() };

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
  // no more than the user may book (their policy's max_gpus), however much is free
  fillBookingForm(pool.name, start, Math.max(end, start + SLOT_MS), Math.min(interval.largest_bookable, bookableLimit(pool)));
  hideOffers();
  $("gb-amount").focus();
}

/** `mayDraw` (an automatic refresh's) says whether the answer may still be drawn. */
async function loadTimeline(mayDraw = () => true) {
  const isNewest = loads.timeline.begin();
  const start = floorSlot(Date.now());
  const range = { start, end: start + Number($("gb-range").value) * DAY_MS };
  const query = new URLSearchParams({ start: toUtcIso(range.start), end: toUtcIso(range.end) });
  const availabilities = await Promise.all(page.pools.map(
    (pool) => api("GET", `pools/${encodeURIComponent(pool.name)}/availability?${query}`)));
  if (!isNewest() || !mayDraw()) return; // another range chosen, or the user now works in it
  drawUnlessShown($("gb-timeline"), { availabilities, myBookings, range }, () => renderTimeline($("gb-timeline"), {
    pools: page.pools, availabilities, myBookings, range,
    detail: $("gb-timeline-detail"), onChoose: chooseStretch,
  }));
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

/** A refusal's offers (book the next free interval, join the waitlist) answer the request as
 * it was refused: they go once one of them is used or the form asks for something else. */
function hideOffers() {
  hideNextFree();
  hideWaitlistOffer();
}

/** Whether `event` changed the request in the form (not a control of the offers themselves). */
function changesRequest(event) {
  return !$("gb-next-free").contains(event.target) && !$("gb-waitlist-offer").contains(event.target);
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
      hideOffers();
      const moved = { ...request, start: free.start, end: free.end };
      // taken meanwhile? the new refusal offers the next interval again
      const booking = await act($("gb-form-feedback"), () => createOnce("bookings", moved),
        bookedMessage(pool), (again) => offerNextFree(moved, pool, again));
      if (booking) fillBookingForm(pool.name, parseUtc(booking.start), parseUtc(booking.end), booking.gpus);
    }),
  }, `Book ${formatSpan(parseUtc(free.start), parseUtc(free.end))} instead`);
  holder.replaceChildren(button);
  holder.classList.remove("d-none");
}

async function submitBooking() {
  hideOffers();
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
    await act(box, () => createOnce("series", { ...request, ...series }),
      (created) => `Booked ${plural(created.bookings.length, "occurrence")} of series ${created.id}.`);
    return;
  }
  await act(box, () => createOnce("bookings", request), bookedMessage(pool), (error) => {
    offerNextFree(request, pool, error);
    // no capacity: the request may also wait for it (waitlist.js)
    if (error.status === 409) offerWaitlist(box, request);
  });
}

// ---------------------------------------------------------------- booking tables

/** Load "My bookings": the first page, or with `keepPages` as many as shown now (a refresh). */
async function loadMyBookings(keepPages = false) {
  const params = { user: config.user, ...listWindow($("gb-mine-show-past").checked) };
  await mine.load(params, { keepPages });
}

function renderMyBookings() {
  const showPast = $("gb-mine-show-past").checked;
  myBookings = [...mine.items].sort(byStart);
  const shown = myBookings.filter((b) => showPast || ACTIVE_STATES.has(b.state));
  drawUnlessShown($("gb-my-bookings"), { shown, more: mine.hasMore }, () => {
    renderBookingTable($("gb-my-bookings"), shown, {
      showUser: false, cancelLabel: "Cancel", box: $("gb-mine-feedback"),
      caption: "My bookings", emptyText: "You have no upcoming or active bookings.",
    });
    $("gb-my-bookings").append(moreButton(mine, "Show more of my bookings", renderMyBookings) ?? "");
  });
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
const WARNING_NOTICES = new Set(["ending_soon", "flagged", "maintenance"]);

async function loadNotices() {
  const isNewest = loads.notices.begin();
  const { notices } = await api("GET", `users/${encodeURIComponent(config.user)}/notices`);
  const shown = JSON.stringify(notices);
  if (!isNewest() || shown === noticesShown) return;
  noticesShown = shown;
  $("gb-notices").replaceChildren(...notices.map((notice) => el("div", {
    // what needs the user's action stands out from what only informs
    class: `alert ${WARNING_NOTICES.has(notice.kind) ? "alert-warning" : "alert-info"}`,
    dataset: { kind: notice.kind, bookingId: notice.booking_id },
  }, serverSentence(notice.message), notice.kind === "start_early" ? startEarlyButton(notice) : null)));
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

// ---------------------------------------------------------------- start-up

/** Load every view again: after an action, and `auto`matically every `refreshSeconds` while the
 * page is open. An automatic refresh draws nothing the user began to work in while its answers
 * were on their way (a "New end…" opened meanwhile would snap shut). */
async function refresh({ auto = false } = {}) {
  const mayDraw = () => !auto || !userIsEditing();
  await loadMyBookings(true);
  if (mayDraw()) renderMyBookings();
  await loadMyWaits($("gb-mine-feedback"));
  await loadBudget();
  await loadTimeline(mayDraw);
  await loadNotices();
  if (config.isAdmin) await refreshAdmin();
}

/** Whether the user is working in what a refresh draws again: a "New end…" open in "My
 * bookings" (maybe half typed; everyone's bookings have none), or a keyboard user moving along
 * the timeline. A focused button does not count: one that keeps the focus after a refusal would
 * stop the refreshes until the user clicked elsewhere. */
function userIsEditing() {
  return $("gb-timeline").contains(document.activeElement)
    || $("gb-my-bookings").querySelector("details[open]") !== null;
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
  $("gb-pool").replaceChildren(...page.pools.map((pool) => el("option", { value: pool.name }, pool.display_name)));
  $("gb-pool").addEventListener("change", () => fillAmounts(page.poolsByName.get($("gb-pool").value)));
  // the running slot is still bookable ("book now")
  const firstStart = floorSlot(Date.now());
  fillBookingForm(page.pools[0].name, firstStart, firstStart + HOUR_MS, 1);
  for (const id of ["gb-start", "gb-end"]) $(id).addEventListener("change", snapInput);
  $("gb-booking-form").addEventListener("submit", oneAtATime(submitBooking));
  for (const type of ["input", "change"]) {
    $("gb-booking-form").addEventListener(type, (event) => { if (changesRequest(event)) hideOffers(); });
  }
  wireRepeatChoice();
  fillRangeChoices();
  $("gb-mine-show-past").addEventListener("change", () => loadMyBookings().then(renderMyBookings).catch(showLoadError));
  wireFeed();
  if (config.isAdmin) wireAdmin();
  // started before the first load, so a page opened while the service is down recovers by itself
  // (an action on its way refreshes the page itself when it is done)
  keepFresh(() => refreshOrReport({ auto: true }), {
    seconds: config.refreshSeconds, isBusy: () => isActing() || userIsEditing(),
  });
  await Promise.all([refresh(), loadFeedState()]);
}

setRefresh(refresh);
start().catch(showLoadError);
