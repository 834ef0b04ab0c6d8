/**
 * JupyterLab plugin: the GPU booking's time left in the status bar, warnings before its end with
 * a one-click extend, and a notice when it ends. It polls the single-user server's
 * gpu-booking/status endpoint (the jhub_gpubooking.lab server extension); on a CPU server that
 * answers {"booked": false} and the plugin shows nothing and stops. The rules of what to show
 * and when are the pure functions of ./booking.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import {
  Announced,
  dueNotices,
  BookedStatus,
  NOTHING_ANNOUNCED,
  Notice,
  Sample,
  Status,
  UNREACHABLE_MESSAGE,
  endedMessage,
  extendLabel,
  hasEnded,
  isUrgent,
  mayTryAgain,
  pollInterval,
  secondsLeftAt,
  statusBarText,
  stoppedMessage,
  takeSample,
  unavailableMessage,
  warningMessage
} from './booking';

const PLUGIN_ID = 'jhub-gpubooking:plugin';
const STATUS_ITEM_ID = 'jhub-gpubooking:status';
/** how often the status bar counts down between polls */
const TICK_MS = 1000;
/** retry after a failed poll before any status arrived */
const RETRY_MS = 30000;

/** A request to the server extension that failed; ``message`` is a sentence for the user. */
class RequestError extends Error {
  constructor(
    message: string,
    readonly status: number | null
  ) {
    super(message);
  }
}

async function request(
  settings: ServerConnection.ISettings,
  endpoint: string,
  init: RequestInit = {}
): Promise<Status> {
  const url = URLExt.join(settings.baseUrl, 'gpu-booking', endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new RequestError('This server cannot be reached.', null);
  }
  let body: any = null;
  try {
    body = await response.json();
  } catch {
    // an answer without JSON (a proxy's error page): its status says enough
  }
  if (!response.ok) {
    const message = body && typeof body.message === 'string' ? body.message : `HTTP ${response.status}`;
    throw new RequestError(message, response.status);
  }
  return body as Status;
}

/** The status bar item: "¼ A100 · 42 min left"; a click opens the reservation page. */
class BookingStatusItem extends Widget {
  constructor(onClick: () => void) {
    super({ node: document.createElement('span') });
    this.addClass('jp-StatusBar-TextItem');
    this.addClass('jp-gpubooking-status');
    this.node.addEventListener('click', onClick);
  }

  display(status: BookedStatus, secondsLeft: number): void {
    this.node.textContent = statusBarText(status, secondsLeft);
    this.node.title = `GPU booking #${status.booking.id} on pool ${status.booking.pool}, until ${new Date(
      status.booking.end
    ).toLocaleString()}. Click to open your bookings.`;
    this.toggleClass('jp-gpubooking-urgent', isUrgent(status, secondsLeft) || hasEnded(status));
  }
}

/** Polls the status, keeps the status bar item right and raises each notice once. */
class BookingWatcher {
  private sample: Sample | null = null;
  private announced: Announced = NOTHING_ANNOUNCED;
  private item: BookingStatusItem | null = null;
  private pollTimer: number | null = null;
  private tickTimer: number | null = null;
  private polling = false;
  private askedAtZero = false;
  private warningId: string | null = null;
  private unavailableId: string | null = null;

  constructor(
    private readonly settings: ServerConnection.ISettings,
    private readonly statusBar: IStatusBar | null
  ) {}

  start(): void {
    void this.poll();
  }

  private async poll(): Promise<void> {
    if (this.polling) {
      return;
    }
    this.polling = true;
    this.clearPoll();
    let delay = RETRY_MS;
    try {
      const status = await request(this.settings, 'status');
      if (!status.booked) {
        return; // a CPU server: nothing to show, nothing to poll
      }
      this.accept(status);
      delay = pollInterval(status);
    } catch (error) {
      if (error instanceof RequestError && error.status === 404 && this.sample === null) {
        console.warn('jhub-gpubooking: the server extension is not enabled on this server');
        return;
      }
      if (error instanceof RequestError && error.status === 424 && this.sample !== null) {
        this.stopped(); // the Hub answers for a server that is not running: nothing left to poll
        return;
      }
      this.failed();
      if (this.sample) {
        delay = pollInterval(this.sample.status);
      }
    } finally {
      this.polling = false;
    }
    this.pollTimer = window.setTimeout(() => void this.poll(), delay);
  }

  private clearPoll(): void {
    if (this.pollTimer !== null) {
      window.clearTimeout(this.pollTimer);
      this.pollTimer = null;
    }
  }

  /** A fresh status from the server (a poll or an extend's answer). */
  private accept(status: BookedStatus): void {
    this.sample = takeSample(this.sample, status, Date.now());
    this.askedAtZero = false;
    if (this.item === null) {
      this.showItem();
    }
    this.update();
  }

  /** This server did not answer (a network error, a proxy's 502/503): said once, poll on. */
  private failed(): void {
    if (this.sample === null || this.announced.ended) {
      return; // nothing shown yet, or the server is stopping after the end: nothing to add
    }
    const last = this.sample.status;
    this.sample = { ...this.sample, status: { ...last, service: 'unavailable', message: UNREACHABLE_MESSAGE } };
    this.update();
  }

  /** This server is not running any more: say why as far as known, and stop. */
  private stopped(): void {
    this.stopTicking();
    if (this.sample === null || this.announced.ended) {
      return;
    }
    this.dismiss(this.warningId);
    this.dismiss(this.unavailableId);
    this.announced = { ...this.announced, ended: true };
    Notification.warning(stoppedMessage(this.sample.status, secondsLeftAt(this.sample, Date.now())), {
      autoClose: false,
      actions: [this.openBookingsAction()]
    });
  }

  private stopTicking(): void {
    if (this.tickTimer !== null) {
      window.clearInterval(this.tickTimer);
      this.tickTimer = null;
    }
  }

  private showItem(): void {
    this.item = new BookingStatusItem(() => this.openBookings());
    if (this.statusBar) {
      this.statusBar.registerStatusItem(STATUS_ITEM_ID, { item: this.item, align: 'left', rank: 50 });
    }
    this.tickTimer = window.setInterval(() => this.update(), TICK_MS);
  }

  /** Count down, raise what is due, and ask the server at once when the local count reached 0. */
  private update(): void {
    if (this.sample === null) {
      return;
    }
    const status = this.sample.status;
    const secondsLeft = secondsLeftAt(this.sample, Date.now());
    this.item?.display(status, secondsLeft);
    const { announced, notices } = dueNotices(this.announced, status, secondsLeft);
    this.announced = announced;
    notices.forEach(notice => this.raise(notice, status));
    if (secondsLeft <= 0 && !hasEnded(status) && !this.askedAtZero) {
      this.askedAtZero = true;
      void this.poll();
    }
    if (announced.ended) {
      this.stopTicking();
    }
  }

  private raise(notice: Notice, status: BookedStatus): void {
    const openBookings = this.openBookingsAction();
    switch (notice.kind) {
      case 'warning': {
        const actions: Notification.IAction[] = [];
        const label = extendLabel(status.extension);
        if (label) {
          const minutes = status.extension.minutes;
          const shownEnd = status.booking.end;
          actions.push({
            label,
            caption: 'The largest extension the policy and free GPUs allow right now',
            displayType: 'accent',
            callback: () => void this.extend(minutes, shownEnd)
          });
        }
        actions.push(openBookings);
        this.dismiss(this.warningId);
        this.warningId = Notification.warning(warningMessage(status, notice.secondsLeft), {
          autoClose: false,
          actions
        });
        break;
      }
      case 'ended':
        this.dismiss(this.warningId);
        this.dismiss(this.unavailableId);
        Notification.warning(endedMessage(status), { autoClose: false, actions: [openBookings] });
        break;
      case 'unavailable':
        this.unavailableId = Notification.warning(unavailableMessage(status), { autoClose: false });
        break;
      case 'available':
        this.dismiss(this.unavailableId);
        this.unavailableId = null;
        break;
    }
  }

  private openBookingsAction(): Notification.IAction {
    return {
      label: 'Open bookings',
      caption: 'Open the GPU reservation page in a new tab',
      displayType: 'link',
      callback: () => this.openBookings()
    };
  }

  private dismiss(id: string | null): void {
    if (id !== null) {
      Notification.dismiss(id);
    }
  }

  /**
   * Extend to ``minutes`` after ``fromEnd``, the end shown when the user clicked: a click sent
   * again after its answer was lost finds that end already reached and extends nothing more.
   */
  private async extend(minutes: number, fromEnd: string): Promise<void> {
    try {
      const status = await request(this.settings, 'extend', {
        method: 'POST',
        body: JSON.stringify({ minutes, from_end: fromEnd })
      });
      if (status.booked) {
        this.dismiss(this.warningId);
        this.warningId = null;
        this.accept(status);
        Notification.success(`Booking extended: ${statusBarText(status, status.seconds_left)}.`, {
          autoClose: 5000
        });
      }
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const actions = [this.openBookingsAction()];
      if (mayTryAgain(error instanceof RequestError ? error.status : null)) {
        actions.unshift({
          label: 'Try again',
          caption: 'Send the same extension again; it is made at most once',
          displayType: 'accent',
          callback: () => void this.extend(minutes, fromEnd)
        });
      }
      Notification.error(`The booking was not extended: ${message}`, { autoClose: false, actions });
    }
    void this.poll();
  }

  private openBookings(): void {
    if (this.sample) {
      window.open(this.sample.status.bookings_url, '_blank', 'noopener');
    }
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPU booking time left, warnings before the end and one-click extend',
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    new BookingWatcher(app.serviceManager.serverSettings, statusBar).start();
  }
};

export default plugin;
