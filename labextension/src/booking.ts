/**
 * What the extension shows and when, as pure functions of the status the single-user server
 * reports (GET {base_url}gpu-booking/status, shape in /work/notes/CONTRACT-19.md) and the browser's
 * clock. No JupyterLab imports here, so the rules are unit-tested in plain Node (test/booking.test.ts).
 */

/** The largest extension the policy and capacity allow right now, or why there is none. */
export interface Extension {
  minutes: number;
  max_end: string | null;
  reason: string | null;
}

export interface Booking {
  id: number;
  pool: string;
  state: string;
  start: string;
  end: string;
}

/** The status of a booked GPU server ({"booked": false} on a CPU server). */
export interface BookedStatus {
  booked: true;
  service: 'ok' | 'unavailable';
  message: string | null;
  booking: Booking;
  share: string;
  now: string;
  seconds_left: number;
  warn_minutes: number[];
  poll_seconds: number;
  extension: Extension;
  bookings_url: string;
}

export type Status = { booked: false } | BookedStatus;

/** Booking states after which the server is being stopped. */
const FINISHED_STATES = new Set(['ended', 'cancelled', 'expired', 'released']);

/** "42 min", "1 h 5 min", "2 h": whole minutes, rounded up so a warning at 10 min never reads "9 min". */
export function formatMinutes(minutes: number): string {
  const total = Math.max(0, Math.ceil(minutes));
  const hours = Math.floor(total / 60);
  const rest = total % 60;
  if (hours === 0) {
    return `${rest} min`;
  }
  return rest === 0 ? `${hours} h` : `${hours} h ${rest} min`;
}

/**
 * True when the server said the booking is over: its state, or no time left by the service's clock.
 * Only the server decides; the local count reaching 0 just makes the extension ask it at once
 * (the booking may have been extended elsewhere meanwhile).
 */
export function hasEnded(status: BookedStatus): boolean {
  return FINISHED_STATES.has(status.booking.state) || status.seconds_left <= 0;
}

/** The status bar text: "¼ A100 · 42 min left", or "¼ A100 · booking ended". */
export function statusBarText(status: BookedStatus, secondsLeft: number): string {
  if (hasEnded(status) || secondsLeft <= 0) {
    return `${status.share} · booking ended`;
  }
  return `${status.share} · ${formatMinutes(secondsLeft / 60)} left`;
}

/** The label of the extend action: "Extend by 30 min", or null when no extension is possible. */
export function extendLabel(extension: Extension): string | null {
  return extension.minutes > 0 ? `Extend by ${formatMinutes(extension.minutes)}` : null;
}

/**
 * Whether an extension that failed with HTTP ``status`` (null: no answer at all) is worth a
 * "Try again": the server or the booking service could not answer, so it may have been made
 * or not; sent again with the end it was shown, it extends at most once. A refusal (4xx) is
 * the service's answer and would only be given again.
 */
export function mayTryAgain(status: number | null): boolean {
  return status === null || status >= 500;
}

/** JupyterLab cuts a notification's message after this many characters; ours fit. */
export const MESSAGE_LIMIT = 140;

/** ``text`` cut to the notification limit at a word, with an ellipsis when cut. */
export function fitMessage(text: string): string {
  if (text.length <= MESSAGE_LIMIT) {
    return text;
  }
  const cut = text.slice(0, MESSAGE_LIMIT - 1);
  const space = cut.lastIndexOf(' ');
  return `${space > MESSAGE_LIMIT / 2 ? cut.slice(0, space) : cut}…`;
}

/** The text of a warning before the end; says why no extension is possible when there is none. */
export function warningMessage(status: BookedStatus, secondsLeft: number): string {
  const text = `Your GPU booking (${status.share}) ends in ${formatMinutes(secondsLeft / 60)}, then this server stops.`;
  if (status.extension.minutes > 0) {
    return fitMessage(`${text} Save your work or extend it.`);
  }
  return fitMessage(`${text} No extension possible: ${status.extension.reason || 'not allowed now'}`);
}

/** Why the server is stopping: the service's own sentence when it gave one. */
export function endedMessage(status: BookedStatus): string {
  // while the service is unavailable, the message says that, not why the booking ended
  if (status.message && status.service === 'ok') {
    return fitMessage(status.message);
  }
  const why = status.booking.state === 'cancelled' ? 'was cancelled' : 'has ended';
  return `Your GPU booking (${status.share}) ${why}, so this server is stopping. Book again to go on using a GPU.`;
}

export const UNAVAILABLE_MESSAGE =
  'The GPU booking service cannot be reached right now: the time left shown may be out of date.';

/**
 * Why this server stopped answering for good (the Hub says it is not running): the end of the
 * booking when it was due, else the likely causes, since the server cannot be asked any more.
 */
export function stoppedMessage(status: BookedStatus, secondsLeft: number): string {
  if (hasEnded(status) || secondsLeft <= 0) {
    return endedMessage(status);
  }
  return (
    `This server has stopped: its GPU booking (${status.share}) was ended or shortened elsewhere, ` +
    'or the server was stopped from the Hub.'
  );
}

/** Our own server did not answer (not the booking service): said once, like an outage. */
export const UNREACHABLE_MESSAGE =
  'This server cannot be reached right now: the GPU booking time left shown may be out of date.';

/** The once-per-outage notice: the server's sentence if it fits a notification, else ours. */
export function unavailableMessage(status: BookedStatus): string {
  return status.message && status.message.length <= MESSAGE_LIMIT ? status.message : UNAVAILABLE_MESSAGE;
}

/**
 * One sample of the status, taken at a browser time (ms). Between samples the time left counts
 * down locally at the service clock's rate, measured over successive samples: 1 on a real Hub,
 * faster on a demo running a fast clock.
 */
export interface Sample {
  status: BookedStatus;
  takenAt: number;
  rate: number;
}

/** The service-clock seconds per browser second between two samples; the old rate when unclear. */
export function clockRate(previous: Sample | null, status: BookedStatus, takenAt: number): number {
  if (previous === null) {
    return 1;
  }
  const browserSeconds = (takenAt - previous.takenAt) / 1000;
  const serviceSeconds = (Date.parse(status.now) - Date.parse(previous.status.now)) / 1000;
  // too short a gap (a poll right after an extend) or a clock that went backwards says nothing
  if (browserSeconds < 1 || !(serviceSeconds > 0)) {
    return previous.rate;
  }
  return serviceSeconds / browserSeconds;
}

/** A new sample of ``status`` taken at ``takenAt``, its rate measured against ``previous``. */
export function takeSample(previous: Sample | null, status: BookedStatus, takenAt: number): Sample {
  return { status, takenAt, rate: clockRate(previous, status, takenAt) };
}

/** The seconds left at browser time ``at``, counted down from the sample; never below 0. */
export function secondsLeftAt(sample: Sample, at: number): number {
  const elapsed = (Math.max(0, at - sample.takenAt) / 1000) * sample.rate;
  return Math.max(0, sample.status.seconds_left - elapsed);
}

/** What has been said already, so each notice comes once. */
export interface Announced {
  bookingId: number | null;
  /** the booking's end the warnings below were given for */
  end: string | null;
  /** thresholds (minutes) already warned about for that end */
  warned: number[];
  ended: boolean;
  unavailable: boolean;
}

export const NOTHING_ANNOUNCED: Announced = {
  bookingId: null,
  end: null,
  warned: [],
  ended: false,
  unavailable: false
};

export type Notice =
  | { kind: 'warning'; threshold: number; secondsLeft: number }
  | { kind: 'ended' }
  | { kind: 'unavailable' }
  | { kind: 'available' };

/**
 * The notices due for ``status`` with ``secondsLeft`` left, and what is announced afterwards.
 *
 * - each warn_minutes threshold is announced once per booking end; an end moved later starts
 *   over (the thresholds lie ahead again), an end moved earlier keeps what was said;
 * - crossing several thresholds at once (a page opened late, a booking shortened) gives one
 *   warning, the most urgent, not a stack;
 * - the end is announced once, when the server says so; no warning after it, nor at a local
 *   count of 0 (the caller asks the server then);
 * - an unreachable service is announced once per outage, and its end ("available") is reported
 *   so the caller can take that notice away.
 */
export function dueNotices(
  announced: Announced,
  status: BookedStatus,
  secondsLeft: number
): { announced: Announced; notices: Notice[] } {
  let next = announced;
  if (next.bookingId !== status.booking.id) {
    next = { ...NOTHING_ANNOUNCED, unavailable: next.unavailable, bookingId: status.booking.id };
  }
  if (next.end !== null && Date.parse(status.booking.end) > Date.parse(next.end)) {
    next = { ...next, warned: [], ended: false };
  }
  next = { ...next, end: status.booking.end };

  const notices: Notice[] = [];
  const unavailable = status.service === 'unavailable';
  if (unavailable && !next.unavailable) {
    notices.push({ kind: 'unavailable' });
  } else if (!unavailable && next.unavailable) {
    notices.push({ kind: 'available' });
  }
  next = { ...next, unavailable };

  if (hasEnded(status)) {
    if (!next.ended) {
      notices.push({ kind: 'ended' });
    }
    return { announced: { ...next, ended: true, warned: [...status.warn_minutes] }, notices };
  }

  if (secondsLeft <= 0) {
    return { announced: next, notices };
  }
  const crossed = status.warn_minutes.filter(
    minutes => secondsLeft <= minutes * 60 && !next.warned.includes(minutes)
  );
  if (crossed.length > 0) {
    notices.push({ kind: 'warning', threshold: Math.min(...crossed), secondsLeft });
    next = { ...next, warned: [...next.warned, ...crossed] };
  }
  return { announced: next, notices };
}

/** True when the status bar should look urgent: within the smallest warning threshold. */
export function isUrgent(status: BookedStatus, secondsLeft: number): boolean {
  return status.warn_minutes.length > 0 && secondsLeft <= Math.min(...status.warn_minutes) * 60;
}

/** Milliseconds between polls: the server's poll_seconds, at least a second (30 s if it sent none). */
export function pollInterval(status: BookedStatus): number {
  const seconds = Number.isFinite(status.poll_seconds) && status.poll_seconds > 0 ? status.poll_seconds : 30;
  return Math.max(1, seconds) * 1000;
}
