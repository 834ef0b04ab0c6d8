// The administration part of the reservation page (shown to Hub admins only): everyone's
// bookings, maintenance windows and the bookings a new one overlaps, users deleted from the Hub
// who still hold something here, the GPUs in use now, and the usage report. The rules stay in
// the API; this shows its answers and refusals.

import {
  $, ACTIVE_STATES, HOUR_MS, NewestLoad, PagedList, api, byStart, config, createOnce, drawUnlessShown, el, floorSlot,
  formatSpan, formatTime, fromLocalInput, oneAtATime, parseUtc, plural, serverSentence, snapInput, toLocalInput, toUtcIso,
} from "./common.js";
import { act, page, poolName, showAlert, showLoadError } from "./page.js";
import { listWindow, moreButton, renderBookingTable } from "./tables.js";

// lists the API pages; the tables show what is loaded and offer the next page
const allBookings = new PagedList("bookings", "bookings");
const maintenanceWindows = new PagedList("maintenance", "windows");
// the views loaded in one piece; see NewestLoad
const loads = {
  holders: new NewestLoad(), report: new NewestLoad(), flagged: new NewestLoad(), missing: new NewestLoad(),
};

/** A section of `containerId` with a heading, a sentence and what `render` makes of the list
 * at `key` of the API's answer at `path`; nothing while the list is empty. */
async function loadListedSection(load, path, key, containerId, heading, sentence, render) {
  const isNewest = load.begin();
  const list = (await api("GET", path))[key];
  if (!isNewest()) return;
  drawUnlessShown($(containerId), list, () => $(containerId).replaceChildren(...(list.length
    ? [el("h3", { class: "h5" }, heading), el("p", { class: "small text-body-secondary" }, sentence), render(list)]
    : [])));
}

/** Bookings the pools can no longer hold (a pool removed from the config, a node or GPUs gone),
 * each with the reason and Force end / Force cancel. */
function loadFlagged() {
  return loadListedSection(loads.flagged, "admin/flagged", "flagged", "gb-flagged",
    "Bookings that cannot be used", "The pools as configured can no longer hold these "
      + "bookings; their users see a notice. End or cancel them, or put their pool or node back.",
    (flagged) => {
      const table = el("div");
      renderBookingTable(table, flagged.map((flag) => flag.booking).sort(byStart), {
        showUser: true, cancelLabel: "Force cancel", box: $("gb-admin-feedback"),
        caption: "Bookings that cannot be used", emptyText: "",
        reasons: new Map(flagged.map((flag) => [flag.booking.id, serverSentence(flag.message)])),
      });
      return table;
    });
}

/** Users the Hub no longer has, with when what they hold here is taken off. */
function loadMissingUsers() {
  const due = (u) => u.removal_due === null ? "never (the check is off)" : formatTime(parseUtc(u.removal_due));
  const ids = (list) => list.length ? list.map((id) => `#${id}`).join(", ") : "none";
  return loadListedSection(loads.missing, "admin/missing-users", "users", "gb-missing-users",
    "Users deleted from the Hub", "The Hub no longer has these users. Their bookings, waits and "
      + "calendar link are taken off from the time shown, unless they are in the Hub again by "
      + "then; for a user renamed in the Hub, run jhub-gpubooking users rename.",
    (users) => simpleTable("Users deleted from the Hub",
      ["User", "Missing since", "Taken off from", "Bookings", "Waits", "Calendar link"],
      users.map((u) => [u.user, formatTime(parseUtc(u.missing_since)), due(u), ids(u.bookings),
        ids(u.waits), u.calendar_link ? "yes" : "no"])));
}

function simpleTable(caption, headings, rows) {
  return el("div", { class: "table-responsive" }, el("table", { class: "table table-sm gb-table" },
    el("caption", { class: "visually-hidden" }, caption),
    el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((cell) => el("td", {}, String(cell))))))));
}

async function loadHolders() {
  const isNewest = loads.holders.begin();
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
  const isNewest = loads.report.begin();
  const report = await api("GET", `admin/report?by=${by}`);
  if (!isNewest()) return; // another grouping was chosen meanwhile
  const hours = (value) => value.toFixed(2);
  const line = (key, t) => [key, t.bookings, hours(t.booked_gpu_hours), hours(t.used_gpu_hours),
    hours(t.idle_gpu_hours), hours(t.released_gpu_hours), hours(t.no_show_gpu_hours),
    hours(t.scheduled_gpu_hours), t.no_shows];
  $("gb-report").replaceChildren(simpleTable("Usage report",
    [by, "Bookings", "Booked", "Used", "Idle", "Released", "No-show", "Scheduled", "No-shows"],
    [...report.rows.map((row) => line(row.key, row)), line("total", report.total)]));
}


/** Load the admin's tables: their first pages, or with `keepPages` as many as shown now. */
async function loadAdmin(keepPages = false) {
  const since = listWindow($("gb-all-show-past").checked);
  // maintenance windows still running or ahead; past ones no longer block anything
  const lists = [[allBookings, since], [maintenanceWindows, listWindow(false)]];
  await Promise.all(lists.map(([list, params]) => list.load(params, { keepPages })));
  renderAllBookings();
  renderMaintenance();
}

function renderAllBookings() {
  const showPast = $("gb-all-show-past").checked;
  const shown = [...allBookings.items].sort(byStart).filter((b) => showPast || ACTIVE_STATES.has(b.state));
  drawUnlessShown($("gb-all-bookings"), { shown, more: allBookings.hasMore }, () => {
    renderBookingTable($("gb-all-bookings"), shown, {
      showUser: true, cancelLabel: "Force cancel", box: $("gb-admin-feedback"),
      caption: "All bookings", emptyText: "No upcoming or active bookings.",
    });
    $("gb-all-bookings").append(moreButton(allBookings, "Show more bookings", renderAllBookings) ?? "");
  });
}

function renderMaintenance() {
  const shown = { windows: maintenanceWindows.items, more: maintenanceWindows.hasMore };
  drawUnlessShown($("gb-maintenance-list"), shown, () => {
    renderMaintenanceTable(maintenanceWindows.items);
    $("gb-maintenance-list").append(moreButton(maintenanceWindows, "Show more maintenance windows", renderMaintenance) ?? "");
  });
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
    el("td", { class: "gb-text" }, block.reason || ""),
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
  // with an Idempotency-Key: the window is added once even if its answer is lost and the
  // admin submits again
  const created = await act(box, () => createOnce("maintenance", body), (block) => {
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

/** Fill the admin's forms and wire their controls (once, when the page starts). */
export function wireAdmin() {
  const firstStart = floorSlot(Date.now());
  $("gb-mw-pool").replaceChildren(...page.pools.map((pool) => el("option", { value: pool.name }, pool.display_name)));
  $("gb-mw-pool").addEventListener("change", fillNodes);
  fillNodes();
  $("gb-mw-start").value = toLocalInput(firstStart);
  $("gb-mw-end").value = toLocalInput(firstStart + 2 * HOUR_MS);
  for (const id of ["gb-mw-start", "gb-mw-end"]) $(id).addEventListener("change", snapInput);
  $("gb-maintenance-form").addEventListener("submit", oneAtATime(submitMaintenance));
  $("gb-all-show-past").addEventListener("change", () => loadAdmin().catch(showLoadError));
  $("gb-report-by").addEventListener("change", () => loadReport().catch(showLoadError));
}

/** Load the admin's views again, keeping the pages shown with "Show more" (a refresh). */
export function refreshAdmin() {
  return Promise.all([loadAdmin(true), loadFlagged(), loadMissingUsers(), loadHolders(), loadReport()]);
}
