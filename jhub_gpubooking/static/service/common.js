// Shared helpers of the reservation page: config, API calls, DOM building, times and amounts.
// The API sends UTC "Z" times; the page shows them in the browser's zone and sends UTC back.

export const config = JSON.parse(document.getElementById("gpu-booking-config").textContent);
const xsrfToken = document.querySelector('meta[name="xsrf-token"]').content;

export const SLOT_MS = config.slotMinutes * 60_000;
export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;
/** Bookings that still hold capacity and can be changed. */
export const ACTIVE_STATES = new Set(["upcoming", "active"]);

export const $ = (id) => document.getElementById(id);

/** Build a DOM element; text children are inserted as text, never as HTML. */
export function el(tag, attributes = {}, ...children) {
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

export class ApiError extends Error {
  /** `payload` is the API's JSON error body (e.g. a capacity refusal's `next_free`), or null. */
  constructor(status, message, payload = null) {
    super(message);
    this.status = status;
    this.payload = payload;
  }
}

/** Call the booking API with the login cookie. HubOAuth wants the _xsrf token on every
 * fetch(), reads included: it only skips the check for plain page navigation. No answer at all
 * (the network, the Hub's proxy down) is an ApiError with status 0 and a sentence for people. */
export async function api(method, path, body, moreHeaders = {}) {
  const headers = { ...moreHeaders, Accept: "application/json", "X-XSRFToken": xsrfToken };
  const options = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(config.apiUrl + path, options);
  } catch {
    throw new ApiError(0, "The booking service could not be reached; check the connection and try again.");
  }
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    let message = `The booking service answered ${response.status} ${response.statusText}; please reload the page.`;
    if (payload && payload.message) message = serverSentence(payload.message);
    else if (PROXY_GAVE_UP.has(response.status)) message = NOT_ANSWERING;
    throw new ApiError(response.status, message, payload);
  }
  return payload;
}

/** Statuses of an answer that is not the service's own JSON error: the Hub's proxy answers
 * them (its error page) while the service is down or restarting, as after a crash, until the
 * Hub has started it again. Reloading would show that error page instead of this one. */
const PROXY_GAVE_UP = new Set([502, 503, 504]);
const NOT_ANSWERING =
  "The booking service is not answering right now (it may be restarting); try again in a few seconds.";

/** Idempotency-Keys of the creates whose answer never came, by what they asked. */
const unanswered = new Map();

/** POST a create to `path` (api/bookings) with an Idempotency-Key, so that sending it again
 * after its answer was lost (no answer, or the proxy's 5xx) answers the booking it made instead
 * of booking twice: the same request keeps its key until an answer, even a refusal, comes
 * back; any other request gets a new one. */
export async function createOnce(path, body) {
  const asked = `${path} ${JSON.stringify(body)}`;
  const key = unanswered.get(asked) ?? newRequestKey();
  unanswered.set(asked, key);
  try {
    const created = await api("POST", path, body, { "Idempotency-Key": key });
    unanswered.delete(asked);
    return created;
  } catch (error) {
    if (error.status > 0 && error.status < 500) unanswered.delete(asked); // decided: not made
    throw error;
  }
}

/** 128 random bits as hex (crypto.randomUUID needs https; a lab's Hub may be plain http). */
function newRequestKey() {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)),
    (byte) => byte.toString(16).padStart(2, "0")).join("");
}

// ---------------------------------------------------------------- loads that overlap

/** The loads of one view can overlap (a box ticked and unticked quickly, the refreshes of two
 * quick actions), and their answers may come back in any order. `begin()` before a load gives
 * a check that stays true only while no later load of the view has begun: an answer that
 * arrives after a newer load began is dropped instead of drawn over the newer one. */
export class NewestLoad {
  #begun = 0;

  begin() {
    const ticket = ++this.#begun;
    return () => ticket === this.#begun;
  }
}

/** An event handler that runs its action one at a time: the clicked button (or the submit
 * button of a submitted form, which never submits natively: the action calls the API) stays
 * disabled until the action settles. A double click then sends one request, not two, whose
 * second answer would replace the first: a refusal such as "already withdrawn" shown over a
 * success, a second maintenance window, a second calendar link that revokes the one shown. */
export function oneAtATime(action) {
  return async (event) => {
    const target = event.currentTarget;
    const isForm = target instanceof HTMLFormElement;
    if (isForm) event.preventDefault();
    const button = isForm ? event.submitter ?? target.querySelector('[type="submit"]') : target;
    if (button.disabled) return;
    button.disabled = true;
    actionsRunning += 1;
    try {
      await action(event);
    } finally {
      actionsRunning -= 1;
      button.disabled = false;
    }
  };
}

let actionsRunning = 0;

/** Whether an action started by the user is still on its way (it refreshes the page itself). */
export const isActing = () => actionsRunning > 0;

// ---------------------------------------------------------------- a page left open

/** Keep a page that stays open for hours current without a reload: `refresh` runs every
 * `seconds` while the page is visible, and when it becomes visible again after at least that
 * long. A hidden tab asks nothing (a lab's forgotten tabs would otherwise poll the service all
 * night). A run is skipped, not queued, while the previous one is on its way or `isBusy()` says
 * the user is in the middle of something a redraw would throw away. 0 seconds: never. */
export function keepFresh(refresh, { seconds, isBusy }) {
  if (!seconds) return;
  const periodMs = seconds * 1000;
  let last = Date.now();
  let running = false;
  const run = async () => {
    if (running || document.visibilityState !== "visible" || isBusy()) return;
    running = true;
    try {
      await refresh();
    } finally {
      last = Date.now();
      running = false;
    }
  };
  setInterval(run, periodMs);
  document.addEventListener("visibilitychange", () => {
    if (Date.now() - last >= periodMs) run();
  });
}

// ---------------------------------------------------------------- redraws

const drawnFrom = new WeakMap();

/** Draw `container` with `draw()` unless it already shows `shown` (the data it is drawn from,
 * compared as JSON). A refresh that finds nothing new leaves the view alone: redrawn, its
 * buttons would be replaced under the user. A click whose mouse-down and mouse-up fall on either
 * side of a redraw reaches neither button, so the action is lost; a keyboard user's focus goes
 * with the button too. */
export function drawUnlessShown(container, shown, draw) {
  const key = JSON.stringify(shown);
  if (drawnFrom.get(container) === key) return;
  draw();
  drawnFrom.set(container, key);
}

// ---------------------------------------------------------------- paged lists

/** A list the API pages (`limit` + `cursor`): the items loaded so far and the next cursor. */
export class PagedList {
  constructor(path, key) {
    this.path = path;
    this.key = key;
    this.items = [];
    this.cursor = null;
    this.loads = new NewestLoad();
  }

  /** Load the list for these query parameters: its first page, or with `keepPages` at least as
   * many items as it holds now (a refresh keeps the pages the user opened with "Show more").
   * Earlier pages are forgotten either way: the list is read again from its start. */
  async load(params, { keepPages = false } = {}) {
    const shown = keepPages ? this.items.length : 0;
    this.params = params;
    this.items = [];
    this.cursor = null;
    this.isNewest = this.loads.begin();
    this.next = null;
    const isNewest = this.isNewest;
    await this.more();
    while (isNewest() && this.hasMore && this.items.length < shown) await this.more();
  }

  /** Append the next page. A call while a page is on its way (a double click on "Show more")
   * waits for that page instead of asking for the same page again. */
  more() {
    if (!this.next) {
      const next = this.#appendNext().finally(() => {
        if (this.next === next) this.next = null;
      });
      this.next = next;
    }
    return this.next;
  }

  async #appendNext() {
    const isNewest = this.isNewest;
    // the service's page_list_size, within the API's page maximum
    const query = new URLSearchParams({ ...this.params, limit: String(config.listLimit) });
    if (this.cursor) query.set("cursor", this.cursor);
    const answer = await api("GET", `${this.path}?${query}`);
    // a newer load began while this page was on its way: its answers alone fill the list,
    // and this caller renders once the page now on its way (if any) is in
    if (!isNewest()) return this.next;
    this.items.push(...answer[this.key]);
    this.cursor = answer.next_cursor;
  }

  get hasMore() {
    return this.cursor !== null && this.cursor !== undefined;
  }
}

// ---------------------------------------------------------------- times

const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
  weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit",
});
export const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
export const dayFormat = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "numeric", month: "short" });

export const parseUtc = (text) => Date.parse(text);
export const toUtcIso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
export const floorSlot = (ms) => Math.floor(ms / SLOT_MS) * SLOT_MS;
const roundSlot = (ms) => Math.round(ms / SLOT_MS) * SLOT_MS;
const sameDay = (a, b) => new Date(a).toDateString() === new Date(b).toDateString();
export const byStart = (a, b) => parseUtc(a.start) - parseUtc(b.start);

// ---------------------------------------------------------------- the service's sentences

// A time or an interval as the service writes it in a sentence (core.timegrid's clock_text and
// span_text): "2026-12-07 10:00 UTC", "2026-12-07 10:00 to 11:00 UTC" (the end's date only when
// it differs), now and then a weekday before it.
const SERVER_TIME = new RegExp(String.raw`(?:(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day )?` +
  String.raw`(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2})(?: to (?:(\d{4})-(\d{2})-(\d{2}) )?(\d{2}):(\d{2}))? UTC`, "g");

/** A sentence of the service (a refusal, a notice, a reason) with its times in the browser's
 * zone, written as the page writes its other times. Every sentence of the service the page
 * shows goes through here. */
export function serverSentence(text) {
  if (typeof text !== "string") return text;
  return text.replace(SERVER_TIME, (match, year, month, day, hour, minute, endYear, endMonth, endDay,
    endHour, endMinute) => {
    const startMs = Date.UTC(+year, +month - 1, +day, +hour, +minute);
    const shown = dateTimeFormat.format(startMs);
    if (endHour === undefined) return shown;
    const endMs = endYear === undefined
      ? Date.UTC(+year, +month - 1, +day, +endHour, +endMinute)
      : Date.UTC(+endYear, +endMonth - 1, +endDay, +endHour, +endMinute);
    // the end alone when it falls on the start's day here, as the service writes it in UTC
    return `${shown} to ${(sameDay(startMs, endMs) ? timeFormat : dateTimeFormat).format(endMs)}`;
  });
}

export function formatTime(ms) {
  return dateTimeFormat.format(ms);
}

export function formatSpan(startMs, endMs) {
  const end = sameDay(startMs, endMs - 1) ? timeFormat.format(endMs) : dateTimeFormat.format(endMs);
  return `${dateTimeFormat.format(startMs)} – ${end}`;
}

/** datetime-local inputs hold local wall time without a zone. */
export function toLocalInput(ms) {
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** Local input value -> epoch ms on the (UTC) slot grid, or null when empty or invalid. */
export function fromLocalInput(input) {
  const ms = new Date(input.value).getTime();
  return Number.isNaN(ms) ? null : roundSlot(ms);
}

/** Keep typed times on the slot grid, so what is sent is what is shown. */
export function snapInput(event) {
  const ms = fromLocalInput(event.currentTarget);
  if (ms !== null) event.currentTarget.value = toLocalInput(ms);
}

// ---------------------------------------------------------------- amounts

function gcd(a, b) {
  return b === 0 ? a : gcd(b, a % b);
}

/** The fewest slices per GPU that hold ``gpus`` exactly (JSON amounts are numbers: 1/7 arrives
 * as 0.142857…). */
function fittingSlices(gpus) {
  for (let slices = 1; slices < 1024; slices++) {
    if (Math.abs(gpus * slices - Math.round(gpus * slices)) < 1e-6) return slices;
  }
  return 1024;
}

export const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;

/** "1/4 GPU", "1 GPU", "2 GPUs": amounts shown as exact fractions of the pool's slices. Without
 * them (null: a booking of a pool no longer configured) the smallest slicing the amount fits. */
export function formatGpus(gpus, slicesPerGpu = 1) {
  slicesPerGpu ??= fittingSlices(gpus);
  const slices = Math.round(gpus * slicesPerGpu);
  const divisor = gcd(slices, slicesPerGpu);
  const numerator = slices / divisor;
  const denominator = slicesPerGpu / divisor;
  if (denominator === 1) return plural(numerator, "GPU");
  if (numerator < denominator) return `${numerator}/${denominator} GPU`;
  // more than one GPU with a share (free GPUs of a sliced pool): "7.5 GPUs", as the service
  // writes amounts (core.model.format_amount), or "7 1/3 GPUs" where no short decimal is exact
  const decimal = Number((numerator / denominator).toFixed(4));
  if (Math.abs(decimal * denominator - numerator) < 1e-9) return `${decimal} GPUs`;
  return `${Math.floor(numerator / denominator)} ${numerator % denominator}/${denominator} GPUs`;
}

/** The most GPUs the user may book at once: one node's size in the pool, and the user's policy
 * (`config.maxGpus`, null without a limit), whose refusal the page then never provokes. */
export function bookableLimit(pool) {
  const policy = config.maxGpus ?? Infinity;
  return Math.min(pool.max_gpus_per_booking, policy);
}

/** Amounts a pool can give the user: each slice step below one GPU, then whole GPUs, up to
 * `bookableLimit`. The smallest share stays even when the policy allows less (the service then
 * says why). */
export function amountChoices(pool) {
  const limit = bookableLimit(pool) + 1e-9;
  const choices = [];
  for (let k = 1; k < pool.slices_per_gpu; k++) choices.push(k / pool.slices_per_gpu);
  for (let n = 1; n <= pool.max_gpus_per_booking; n++) choices.push(n);
  const allowed = choices.filter((amount) => amount <= limit);
  return allowed.length ? allowed : choices.slice(0, 1);
}
