// The booking tables of the reservation page ("My bookings", everyone's bookings for admins,
// the bookings a new maintenance window overlaps): a row per booking with what its reader may
// do to it (end, cancel, extend, pick a new end, cancel the series), and paging under a table.

import {
  ACTIVE_STATES, DAY_MS, HOUR_MS, SLOT_MS, api, config, el, floorSlot, formatGpus, formatSpan, formatTime,
  fromLocalInput, oneAtATime, parseUtc, snapInput, toLocalInput, toUtcIso,
} from "./common.js";
import { act, poolName, showAlert, showLoadError, slicesOf } from "./page.js";
import { cancelSeriesButton, seriesBadge } from "./planning.js";

function bookingRow(booking, { showUser, cancelLabel, box, reasons }) {
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
    if (!showUser && booking.series_id != null) actions.append(cancelSeriesButton(booking, box));
  }
  const cells = [
    showUser ? el("td", {}, booking.user) : null,
    el("td", {}, poolName(booking.pool)),
    el("td", {}, formatGpus(booking.gpus, slices)),
    el("td", {}, el("time", { datetime: booking.start }, formatTime(start))),
    el("td", {}, el("time", { datetime: booking.end }, formatTime(end))),
    el("td", {}, booking.state, seriesBadge(booking), booking.server !== null && booking.server !== undefined
      ? el("div", { class: "small text-body-secondary" }, `in use by server "${booking.server || "default"}"`) : null,
    // why the pools can no longer hold it (the table of flagged bookings)
    reasons?.has(booking.id) ? el("div", { class: "small text-danger" }, reasons.get(booking.id)) : null),
    el("td", { class: "small" }, where, booking.placement_provisional
      // an upcoming booking may still move to other GPUs of its pool to let another request in
      ? el("div", { class: "text-body-secondary", title: "It may move to other GPUs of this pool "
        + "until it starts; your server gets the final GPUs." }, "provisional, GPU assigned at start")
      : null),
    el("td", { class: "small gb-text" }, booking.note || ""),
    el("td", {}, actions),
  ];
  return el("tr", { dataset: { bookingId: booking.id, state: booking.state } }, ...cells);
}

function extendControls(booking, box) {
  const end = parseUtc(booking.end);
  // the next point of the grid: one slot on, or less for a booking made before the admin
  // made the grid coarser (its end is off the new grid, which the service would refuse)
  const nextEnd = floorSlot(end) + SLOT_MS;
  const minutes = Math.round((nextEnd - end) / 60_000);
  const plusSlot = el("button", {
    type: "button", class: "btn btn-sm btn-outline-secondary",
    "aria-label": `Extend booking ${booking.id} by ${minutes} minutes`,
    onclick: oneAtATime(() => changeEnd(booking, nextEnd, box)),
  }, `+${minutes} min`);
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

export function renderBookingTable(container, bookings, options) {
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
export function listWindow(showPast) {
  return { start: toUtcIso(floorSlot(Date.now()) - (showPast ? PAST_DAYS * DAY_MS : 0)) };
}

/** A "Show more" button under a table while the API has further pages of its list. */
export function moreButton(list, label, render) {
  if (!list.hasMore) return null;
  return el("button", {
    type: "button", class: "btn btn-sm btn-outline-secondary gb-more",
    onclick: () => list.more().then(render).catch(showLoadError),
  }, label);
}
