// The availability timeline: one bar per pool, coloured by the share of GPUs still free,
// with the user's own bookings as a thin line below it. Each stretch of a bar is a button:
// hover or focus shows its numbers, choosing it fills in the booking form.

import {
  ACTIVE_STATES, DAY_MS, bookableLimit, dayFormat, el, formatGpus, formatSpan, parseUtc, plural, timeFormat,
} from "./common.js";

/** Colour level of a stretch; the legend in the template names the same four levels. */
function freeLevel(freeGpus, totalGpus) {
  if (freeGpus <= 0) return "none";
  if (freeGpus >= totalGpus) return "all";
  return freeGpus * 2 >= totalGpus ? "most" : "few";
}

function placer(range) {
  const span = range.end - range.start;
  return (startMs, endMs) => {
    const left = Math.max(0, (startMs - range.start) / span) * 100;
    const right = Math.min(1, (endMs - range.start) / span) * 100;
    return { left: `${left}%`, width: `${Math.max(0, right - left)}%` };
  };
}

/** Axis marks at local midnights, or every few hours when the view spans three days or less. */
function axisTicks(range) {
  const days = (range.end - range.start) / DAY_MS;
  const everyHours = days <= 1 ? 2 : days <= 3 ? 6 : 24;
  const tick = new Date(range.start);
  tick.setHours(Math.floor(tick.getHours() / everyHours) * everyHours, 0, 0, 0);
  const ticks = [];
  for (; tick.getTime() < range.end; tick.setHours(tick.getHours() + everyHours)) {
    if (tick.getTime() > range.start) {
      const label = tick.getHours() === 0 ? dayFormat.format(tick) : timeFormat.format(tick);
      ticks.push({ at: tick.getTime(), label });
    }
  }
  return ticks;
}

function segmentLabel(pool, interval) {
  const free = formatGpus(interval.free_gpus, pool.slices_per_gpu).replace(/ GPUs?$/, "");
  // what the user may book: the user's policy may allow less than is free
  const bookable = formatGpus(Math.min(interval.largest_bookable, bookableLimit(pool)), pool.slices_per_gpu);
  return `${pool.display_name}, ${formatSpan(parseUtc(interval.start), parseUtc(interval.end))}: `
    + `${free} of ${plural(pool.total_gpus, "GPU")} free, at most ${bookable} bookable at once.`;
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

function renderPoolRow(pool, availability, myBookings, view) {
  const { place, ticks, detail, onChoose } = view;
  const describe = (event) => { detail.textContent = event.currentTarget.getAttribute("aria-label"); };
  const track = el("div", { class: "gb-track", role: "group", "aria-label": `Free GPUs in ${pool.display_name}` });
  availability.intervals.forEach((interval, index) => {
    const label = segmentLabel(pool, interval);
    track.append(el("button", {
      type: "button",
      class: `gb-seg gb-level-${freeLevel(interval.free_gpus, pool.total_gpus)}`,
      style: place(parseUtc(interval.start), parseUtc(interval.end)),
      tabindex: index === 0 ? "0" : "-1",
      title: label,
      "aria-label": label,
      dataset: { start: interval.start, end: interval.end, free: interval.free_gpus },
      onmouseenter: describe,
      onfocus: describe,
      onkeydown: moveWithinTrack,
      onclick: (event) => {
        document.querySelectorAll(".gb-seg.gb-selected").forEach((s) => s.classList.remove("gb-selected"));
        event.currentTarget.classList.add("gb-selected");
        onChoose(pool, interval);
      },
    }));
  });
  ticks.forEach((tick) => track.append(el("span", { class: "gb-tick", style: place(tick.at, tick.at) })));

  const mine = el("div", { class: "gb-mine-track", role: "list", "aria-label": `Your bookings in ${pool.display_name}` });
  for (const booking of myBookings) {
    if (booking.pool !== pool.name || !ACTIVE_STATES.has(booking.state)) continue;
    const label = `Your booking: ${formatGpus(booking.gpus, pool.slices_per_gpu)}, `
      + formatSpan(parseUtc(booking.start), parseUtc(booking.end));
    mine.append(el("span", {
      class: "gb-mine", role: "listitem", title: label, "aria-label": label,
      style: place(parseUtc(booking.start), parseUtc(booking.end)),
      dataset: { bookingId: booking.id },
    }));
  }
  const details = [pool.gpu_model, plural(pool.total_gpus, "GPU"),
    pool.backend !== "whole" ? `shared (${pool.backend})` : null];
  return el("div", { class: "gb-pool-row", dataset: { pool: pool.name } },
    el("div", { class: "gb-pool-label" },
      el("strong", {}, pool.display_name), el("br"),
      el("span", { class: "small text-body-secondary" }, details.filter(Boolean).join(" · "))),
    track, el("div"), mine);
}

/**
 * Draw the bars of all pools into ``container`` for ``range`` ({start, end} in epoch ms).
 * ``availabilities`` are the API's answers, in the order of ``pools``; ``detail`` is the
 * live region that repeats the numbers of the stretch under the pointer or focus.
 */
export function renderTimeline(container, { pools, availabilities, myBookings, range, detail, onChoose }) {
  const view = { place: placer(range), ticks: axisTicks(range), detail, onChoose };
  const axis = el("div", { class: "gb-axis", "aria-hidden": "true" },
    view.ticks.map((tick) => el("span", { class: "gb-tick", style: view.place(tick.at, tick.at) }, tick.label)));
  container.replaceChildren(
    el("div", { class: "gb-pool-row" }, el("div"), axis),
    ...pools.map((pool, i) => renderPoolRow(pool, availabilities[i], myBookings, view)));
  container.setAttribute("aria-busy", "false");
}
