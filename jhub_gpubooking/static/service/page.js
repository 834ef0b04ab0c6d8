// The reservation page's shared state and how it reports: the pools, an action's outcome (the
// success message or the API's refusal, then a refresh of the page) and a load that failed.
// The page's modules act through `act`; booking.js says what a refresh loads (`setRefresh`).

import { $, el, serverSentence } from "./common.js";

/** The pools as the API lists them, loaded once when the page starts. */
export const page = { pools: [], poolsByName: new Map() };

export function showAlert(box, kind, message) {
  box.classList.remove("d-none", "alert-success", "alert-danger");
  box.classList.add(`alert-${kind}`);
  box.replaceChildren(message);
}

/** Run a write action; report success or the API's refusal in the given alert box
 * (`onRefusal` then gets the error too, e.g. to offer what the refusal suggests). The page is
 * refreshed after a success; a refresh that fails is reported as the page's, not as the action's
 * (the booking was made even if the list showing it could not be read just then). */
export async function act(box, action, successMessage, onRefusal) {
  let result;
  try {
    result = await action();
  } catch (error) {
    showAlert(box, "danger", error.message);
    if (onRefusal) onRefusal(error);
    // refused (4xx): what the refusal is about may have changed in another tab or by the
    // service (a wait booked, a booking cancelled), so the lists are read again as after a
    // success; with no answer or a 5xx the service may be down, and the refreshes say so
    if (error.status >= 400 && error.status < 500) await refreshOrReport();
    return null;
  }
  showAlert(box, "success", typeof successMessage === "function" ? successMessage(result) : successMessage);
  await refreshOrReport();
  return result;
}

/** A pool's name for people; bookings of a pool no longer configured keep its name, marked. */
export function poolName(name) {
  return page.poolsByName.get(name)?.display_name ?? `${name} (no longer configured)`;
}

/** Slices per GPU of a pool; null for a pool no longer configured (see `formatGpus`). */
export function slicesOf(name) {
  return page.poolsByName.get(name)?.slices_per_gpu ?? null;
}
// ---------------------------------------------------------------- refresh and load errors

let refreshPage = async () => {};

/** What a refresh loads (booking.js: every view of the page, see its `refresh`). */
export function setRefresh(refresh) {
  refreshPage = refresh;
}

/** Refresh, and say so on the page when that fails (the service or its database may be down
 * for a while: the page keeps trying, and the message goes once a refresh works again). */
export async function refreshOrReport(options) {
  try {
    await refreshPage(options);
    $("gb-load-error").classList.add("d-none");
  } catch (error) {
    showLoadError(error, "could not refresh");
  }
}

export function showLoadError(error, what = "could not load") {
  const box = $("gb-load-error");
  // 403 on a read: the login ran out (or the user's rights changed) while the page was open;
  // loading the page again goes through the Hub's login and back
  const reload = error.status === 403
    ? el("a", { href: window.location.href, class: "alert-link ms-1" }, "Reload the page") : null;
  box.replaceChildren(`The booking page ${what}: ${error.message}`, reload ?? "");
  box.classList.remove("d-none");
}
