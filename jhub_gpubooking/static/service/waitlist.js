// The waitlist on the reservation page: "Join the waitlist" beside a capacity refusal, and the
// user's waits under "My bookings" (with "Withdraw"). The rules stay in the API (api/waits);
// this only shows its answers and refusals.

import {
  HOUR_MS, NewestLoad, SLOT_MS, api, config, createOnce, drawUnlessShown, el, formatGpus, formatSpan, formatTime,
  fromLocalInput, parseUtc, oneAtATime, snapInput, toLocalInput, toUtcIso,
} from "./common.js";
import { act, poolName, slicesOf } from "./page.js";

const waitLoads = new NewestLoad();

/** What a wait asks for, in words: amount, pool and when. */
function describe(wait) {
  const start = parseUtc(wait.start);
  const what = `${formatGpus(wait.gpus, slicesOf(wait.pool))} in ${poolName(wait.pool)}`;
  if (wait.window_end === wait.end) return `${what}, ${formatSpan(start, parseUtc(wait.end))}`;
  return `${what} for ${wait.minutes} min between ${formatSpan(start, parseUtc(wait.window_end))}`;
}

export function hideWaitlistOffer() {
  const holder = document.getElementById("gb-waitlist-offer");
  holder.replaceChildren();
  holder.classList.add("d-none");
}

/** Beside a capacity refusal (409) of ``request``: join the waitlist, for the same interval or
 * for the first interval of that length before a later end the user may choose. Success or
 * refusal is reported in ``box`` (the form's feedback). */
export function offerWaitlist(box, request) {
  const end = parseUtc(request.end);
  const input = el("input", {
    type: "datetime-local", class: "form-control form-control-sm", id: "gb-wait-window-end",
    value: toLocalInput(end + 4 * HOUR_MS), onchange: snapInput, disabled: true,
  });
  const flexible = el("input", {
    type: "checkbox", class: "form-check-input", id: "gb-wait-flexible",
    onchange: () => { input.disabled = !flexible.checked; },
  });
  const join = el("button", {
    type: "button", class: "btn btn-sm btn-outline-primary", id: "gb-join-waitlist",
    onclick: () => {
      const windowEnd = flexible.checked ? fromLocalInput(input) : null;
      const body = windowEnd === null ? request : { ...request, window_end: toUtcIso(windowEnd) };
      hideWaitlistOffer();
      const nextFree = document.getElementById("gb-next-free"); // the refusal's other offer goes too
      nextFree.replaceChildren();
      nextFree.classList.add("d-none");
      act(box, () => createOnce("waits", body), (wait) => (wait.state === "booked"
        ? `That fitted at once: booked (booking ${wait.booking_id}).`
        : `You are on the waitlist (wait ${wait.id}). It is booked for you when the GPUs free up; `
          + "you will see a notice here, and it appears in your calendar feed."));
    },
  }, "Join the waitlist");
  const holder = document.getElementById("gb-waitlist-offer");
  holder.replaceChildren(join,
    el("div", { class: "form-check mt-1" }, flexible,
      el("label", { class: "form-check-label", for: flexible.id }, "Any time of this length, ending by")),
    el("label", { class: "visually-hidden", for: input.id }, "Latest end of the wait"), input);
  holder.classList.remove("d-none");
}

/** The user's waiting requests (and those booked or expired lately) under "My bookings". */
export async function loadMyWaits(box) {
  const container = document.getElementById("gb-my-waits");
  if (!container) return;
  const isNewest = waitLoads.begin();
  const { waits } = await api("GET", `waits?${new URLSearchParams({ user: config.user, state: "waiting" })}`);
  if (!isNewest()) return;
  drawUnlessShown(container, waits, () => drawWaits(container, waits, box));
}

function drawWaits(container, waits, box) {
  if (!waits.length) {
    container.replaceChildren();
    return;
  }
  container.replaceChildren(
    el("h3", { class: "h6" }, "Waiting for GPUs"),
    el("ul", { class: "list-unstyled" }, waits.map((wait) => el("li", {
      class: "mb-1", dataset: { waitId: wait.id, state: wait.state },
    }, `${describe(wait)} — waiting since ${formatTime(parseUtc(wait.created))}; `
      + `expires ${formatTime(parseUtc(wait.latest_start) + SLOT_MS)}. `,
    el("button", {
      type: "button", class: "btn btn-sm btn-outline-danger",
      "aria-label": `Withdraw wait ${wait.id}`,
      onclick: oneAtATime(() => act(box, () => api("DELETE", `waits/${wait.id}`), `Wait ${wait.id} is withdrawn.`)),
    }, "Withdraw")))),
  );
}
