// Budgets and recurring series on the reservation page: the budget box next to the booking
// form, the "Repeat" choice of the form, and the series badge / "Cancel series" of a booking.
// The rules stay in the API; this only shows its answers and refusals.

import { $, NewestLoad, api, config, el, formatTime, oneAtATime, parseUtc } from "./common.js";
import { act } from "./page.js";

const hours = (value) => Number(value.toFixed(2)).toString();
const budgetLoads = new NewestLoad();

/** Show every budget the user books against, with what is left and when it refills. */
export async function loadBudget() {
  const box = $("gb-budget");
  if (!box) return;
  const isNewest = budgetLoads.begin();
  const { budgets, charge } = await api("GET", `users/${encodeURIComponent(config.user)}/budget`);
  if (!isNewest()) return;
  if (!budgets.length) {
    box.replaceChildren();
    return;
  }
  const counted = charge === "used" ? "hours servers ran plus hours still booked" : "booked hours";
  box.replaceChildren(
    el("h3", { class: "h6 mb-1" }, "GPU-hour budget"),
    el("ul", { class: "list-unstyled mb-1" }, budgets.map((budget) => el("li", {
      dataset: { budgetScope: budget.scope, budgetName: budget.name },
    }, `${budget.scope === "group" ? `Group ${budget.name}` : "You"}: `
      + `${hours(budget.remaining_gpu_hours)} of ${hours(budget.gpu_hours)} GPU-hours left this `
      + `${budget.period}; refills ${formatTime(parseUtc(budget.refill))}.`))),
    el("p", { class: "text-body-secondary mb-0" }, `Budgets count ${counted}.`),
  );
}

/** The form's "Repeat" choice: null for a single booking, else {repeat, count}. */
export function seriesChoice() {
  const repeat = $("gb-repeat")?.value;
  if (!repeat) return null;
  // the browser's zone, so a weekly lab keeps its local time across daylight-saving changes
  const timeZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return { repeat, count: Number($("gb-repeat-count").value), time_zone: timeZone };
}

export function wireRepeatChoice() {
  const select = $("gb-repeat");
  if (!select) return;
  select.addEventListener("change", () => { $("gb-repeat-count").disabled = !select.value; });
}

/** A badge naming the booking's series (nothing for single bookings). */
export function seriesBadge(booking) {
  if (booking.series_id === null || booking.series_id === undefined) return null;
  return el("span", { class: "badge text-bg-secondary ms-1" }, `series ${booking.series_id}`);
}

/** "Cancel series" for a booking that is one occurrence of a series. */
export function cancelSeriesButton(booking, box) {
  if (booking.series_id === null || booking.series_id === undefined) return null;
  return el("button", {
    type: "button", class: "btn btn-sm btn-outline-danger",
    "aria-label": `Cancel series ${booking.series_id}`,
    onclick: oneAtATime(async () => {
      if (!window.confirm(`Cancel every upcoming booking of series ${booking.series_id}?`)) return;
      await act(box, () => api("DELETE", `series/${booking.series_id}`), `Series ${booking.series_id} is cancelled.`);
    }),
  }, "Cancel series");
}
