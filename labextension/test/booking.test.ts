import { describe, expect, it } from 'vitest';

import {
  Announced,
  BookedStatus,
  MESSAGE_LIMIT,
  NOTHING_ANNOUNCED,
  clockRate,
  dueNotices,
  endedMessage,
  extendLabel,
  fitMessage,
  formatMinutes,
  isUrgent,
  mayTryAgain,
  pollInterval,
  secondsLeftAt,
  statusBarText,
  stoppedMessage,
  takeSample,
  UNAVAILABLE_MESSAGE,
  unavailableMessage,
  warningMessage
} from '../src/booking';

const END = '2026-11-23T18:00:00Z';

/** A booked GPU server's status as the server extension reports it, ``minutesLeft`` before END. */
function status(minutesLeft: number, changes: Partial<BookedStatus> = {}): BookedStatus {
  const now = new Date(Date.parse(changes.booking?.end ?? END) - minutesLeft * 60000).toISOString();
  return {
    booked: true,
    service: 'ok',
    message: null,
    booking: { id: 7, pool: 'a100', state: 'active', start: '2026-11-23T16:00:00Z', end: END },
    share: '¼ A100',
    now,
    seconds_left: minutesLeft * 60,
    warn_minutes: [10, 2],
    poll_seconds: 30,
    extension: { minutes: 30, max_end: '2026-11-23T18:30:00Z', reason: null },
    bookings_url: '/services/gpu-booking/',
    ...changes
  };
}

/** Feed statuses in order; the kinds of notice each one raised. */
function replay(steps: Array<[BookedStatus, number?]>): string[][] {
  let announced: Announced = NOTHING_ANNOUNCED;
  return steps.map(([s, secondsLeft]) => {
    const result = dueNotices(announced, s, secondsLeft ?? s.seconds_left);
    announced = result.announced;
    return result.notices.map(n => (n.kind === 'warning' ? `warning ${n.threshold}` : n.kind));
  });
}

describe('formatting', () => {
  it('rounds minutes up and writes hours past the hour', () => {
    expect([42, 41.01, 0.2, 0, 60, 65, 119.5, 480].map(formatMinutes)).toEqual([
      '42 min', '42 min', '1 min', '0 min', '1 h', '1 h 5 min', '2 h', '8 h'
    ]);
  });

  it('writes the status bar text of the issue', () => {
    expect(statusBarText(status(42), 42 * 60)).toBe('¼ A100 · 42 min left');
    expect(statusBarText(status(42), 41.5 * 60)).toBe('¼ A100 · 42 min left');
    expect(statusBarText(status(90, { share: '2 × L4' }), 90 * 60)).toBe('2 × L4 · 1 h 30 min left');
  });

  it('says the booking ended when the server says so or the local count is out', () => {
    expect(statusBarText(status(0), 0)).toBe('¼ A100 · booking ended');
    expect(statusBarText(status(5), 0)).toBe('¼ A100 · booking ended');
    const cancelled = status(5);
    cancelled.booking = { ...cancelled.booking, state: 'cancelled' };
    expect(statusBarText(cancelled, 300)).toBe('¼ A100 · booking ended');
  });

  it('labels the extend action with the largest extension, or none', () => {
    expect(extendLabel({ minutes: 30, max_end: null, reason: null })).toBe('Extend by 30 min');
    expect(extendLabel({ minutes: 75, max_end: null, reason: null })).toBe('Extend by 1 h 15 min');
    expect(extendLabel({ minutes: 0, max_end: null, reason: 'the next slot is booked' })).toBeNull();
  });

  it('offers to try a failed extension again only when nobody answered it', () => {
    // no answer, or the server or the service failing: it may or may not have been made
    expect([null, 500, 502, 503, 504].map(mayTryAgain)).toEqual([true, true, true, true, true]);
    // the service's refusal (the GPU is taken, a policy) would only come again
    expect([400, 403, 409, 422].map(mayTryAgain)).toEqual([false, false, false, false]);
  });

  it('warns with the time left, and says why no extension is possible', () => {
    expect(warningMessage(status(10), 600)).toBe(
      'Your GPU booking (¼ A100) ends in 10 min, then this server stops. Save your work or extend it.'
    );
    const full = status(2, { extension: { minutes: 0, max_end: null, reason: 'bob booked the next hour' } });
    expect(warningMessage(full, 100)).toBe(
      'Your GPU booking (¼ A100) ends in 2 min, then this server stops. No extension possible: bob booked the next hour'
    );
  });

  it('keeps every message within the notification limit, cutting at a word', () => {
    const reason = 'the policy of your group allows at most eight hours a day and you have used them all already today';
    const message = warningMessage(status(2, { extension: { minutes: 0, max_end: null, reason } }), 120);
    expect(message).toBe(
      'Your GPU booking (¼ A100) ends in 2 min, then this server stops. No extension possible: ' +
        'the policy of your group allows at most eight…'
    );
    expect(message.length).toBeLessThanOrEqual(MESSAGE_LIMIT);
    expect(fitMessage('short')).toBe('short');
    expect(fitMessage('x'.repeat(200))).toBe(`${'x'.repeat(MESSAGE_LIMIT - 1)}…`);
  });

  it('explains the end with the server sentence, or by the booking state', () => {
    expect(endedMessage(status(0, { message: 'Your booking was ended by an admin.' }))).toBe(
      'Your booking was ended by an admin.'
    );
    expect(endedMessage(status(0))).toBe(
      'Your GPU booking (¼ A100) has ended, so this server is stopping. Book again to go on using a GPU.'
    );
    const cancelled = status(3);
    cancelled.booking = { ...cancelled.booking, state: 'cancelled' };
    expect(endedMessage(cancelled)).toBe(
      'Your GPU booking (¼ A100) was cancelled, so this server is stopping. Book again to go on using a GPU.'
    );
    // the sentence of an unavailable service is about the outage, not the end
    expect(endedMessage(status(0, { service: 'unavailable', message: 'cannot reach the service' }))).toBe(
      'Your GPU booking (¼ A100) has ended, so this server is stopping. Book again to go on using a GPU.'
    );
  });

  it('says why the server stopped when it can no longer be asked', () => {
    expect(stoppedMessage(status(0.5), 0)).toBe(endedMessage(status(0.5)));
    expect(stoppedMessage(status(20), 1200)).toBe(
      'This server has stopped: its GPU booking (¼ A100) was ended or shortened elsewhere, or the server was stopped from the Hub.'
    );
    expect(stoppedMessage(status(20), 1200).length).toBeLessThanOrEqual(MESSAGE_LIMIT);
  });

  it('says the service is unavailable in the server sentence when it fits a notification', () => {
    const refused = 'The GPU booking service refused this server: 403 Forbidden';
    expect(unavailableMessage(status(5, { service: 'unavailable', message: refused }))).toBe(refused);
    const long = 'The GPU booking service cannot be reached right now, so the time left is the end as it was ' +
      'when this server started; extending is not possible until it is back.';
    expect(unavailableMessage(status(5, { service: 'unavailable', message: long }))).toBe(UNAVAILABLE_MESSAGE);
    expect(UNAVAILABLE_MESSAGE.length).toBeLessThanOrEqual(MESSAGE_LIMIT);
  });
});

describe('notices', () => {
  it('warns once at each threshold as the time runs out, then announces the end once', () => {
    expect(
      replay([[status(30)], [status(10.5)], [status(9.9)], [status(5)], [status(2)], [status(1)], [status(0)], [status(0)]])
    ).toEqual([[], [], ['warning 10'], [], ['warning 2'], [], ['ended'], []]);
  });

  it('gives the most urgent warning only when several thresholds are crossed at once', () => {
    expect(replay([[status(1.5)], [status(1)]])).toEqual([['warning 2'], []]);
  });

  it('starts over when the end moves later, and keeps what was said when it moves earlier', () => {
    const later = '2026-11-23T18:30:00Z';
    const earlier = '2026-11-23T17:55:00Z';
    const moved = (end: string, minutesLeft: number) =>
      status(minutesLeft, { booking: { id: 7, pool: 'a100', state: 'active', start: '2026-11-23T16:00:00Z', end } });
    expect(
      replay([
        [status(9)], // warned at 10
        [moved(later, 39)], // extended by 30 min: nothing due now
        [moved(later, 9.5)], // the 10-minute warning again, for the new end
        [moved(earlier, 1.5)], // shortened: the 2-minute warning only
        [moved(earlier, 1)]
      ])
    ).toEqual([['warning 10'], [], ['warning 10'], ['warning 2'], []]);
  });

  it('warns on the local count between polls, but leaves the end to the server', () => {
    const polled = status(10.2);
    expect(replay([[polled], [polled, 9.9 * 60], [polled, 0]])).toEqual([[], ['warning 10'], []]);
  });

  it('announces a cancelled booking as ended at once', () => {
    const cancelled = status(20);
    cancelled.booking = { ...cancelled.booking, state: 'cancelled' };
    expect(replay([[status(20)], [cancelled], [cancelled]])).toEqual([[], ['ended'], []]);
  });

  it('says once per outage that the service is unavailable, and when it is back', () => {
    const down = status(30, { service: 'unavailable' });
    expect(replay([[status(31)], [down], [down], [status(29)], [down]])).toEqual([
      [], ['unavailable'], [], ['available'], ['unavailable']
    ]);
  });

  it('forgets the warnings of another booking', () => {
    const next = status(9);
    next.booking = { ...next.booking, id: 8 };
    expect(replay([[status(9)], [next]])).toEqual([['warning 10'], ['warning 10']]);
  });

  it('honours the thresholds the server configured', () => {
    expect(replay([[status(16, { warn_minutes: [15] })], [status(14, { warn_minutes: [15] })]])).toEqual([
      [], ['warning 15']
    ]);
    expect(replay([[status(1, { warn_minutes: [] })]])).toEqual([[]]);
  });

  it('looks urgent within the smallest threshold', () => {
    expect([isUrgent(status(3), 180), isUrgent(status(2), 120), isUrgent(status(2, { warn_minutes: [] }), 60)]).toEqual([
      false, true, false
    ]);
  });
});

describe('counting down between polls', () => {
  it('counts at the rate of the service clock measured over two polls', () => {
    const first = takeSample(null, status(30), 1_000_000);
    expect(first.rate).toBe(1);
    expect(secondsLeftAt(first, 1_000_000 + 60_000)).toBe(29 * 60);
    // a demo on a fast clock: 10 service minutes passed in 30 browser seconds
    const second = takeSample(first, status(20), 1_030_000);
    expect(second.rate).toBe(20);
    expect(secondsLeftAt(second, 1_030_000 + 15_000)).toBe(15 * 60);
    expect(secondsLeftAt(second, 1_030_000 + 600_000)).toBe(0);
  });

  it('keeps the last rate when two polls come too close together or the clock went back', () => {
    const first = { status: status(30), takenAt: 0, rate: 20 };
    expect(clockRate(first, status(29), 500)).toBe(20);
    expect(clockRate(first, status(31), 5000)).toBe(20);
  });

  it('polls as often as the server asks, at most once a second', () => {
    expect(pollInterval(status(5, { poll_seconds: 2 }))).toBe(2000);
    expect(pollInterval(status(5, { poll_seconds: 0.1 }))).toBe(1000);
    expect(pollInterval(status(5, { poll_seconds: 0 }))).toBe(30000);
  });
});
