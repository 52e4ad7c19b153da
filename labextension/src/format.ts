/**
 * The words and numbers the extension shows. Pure functions (tested in __tests__).
 */
import { IReading, IWarning, ILostKernels, IDevice } from './types';

const DOT = ' \u00b7 ';

/** Bytes as GiB with one decimal ("2.1"); "?" when unknown. */
export function gib(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined
    ? '?'
    : (bytes / Math.pow(2, 30)).toFixed(1);
}

/** A time of day ("14:05") from seconds since the epoch. */
export function clock(ts: number): string {
  return new Date(ts * 1000).toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit'
  });
}

/** "at 14:05 (in 12 min)", or "soon" when the culler gave no time. */
export function when(
  ts: number | null | undefined,
  now: number = Date.now()
): string {
  if (!ts) {
    return 'soon';
  }
  const mins = Math.max(0, Math.round((ts * 1000 - now) / 60000));
  return 'at ' + clock(ts) + ' (in ' + mins + ' min)';
}

/**
 * The idle warning's notification. JupyterLab cuts a notification at 140
 * characters: keep it short.
 */
export function idleMessage(w: IWarning, now: number = Date.now()): string {
  const what = w.profile ? 'Idle GPU (' + w.profile + ')' : 'Idle GPU';
  const why = w.reason ? ': ' + w.reason : '';
  return what + ' will be released ' + when(w.cull_at, now) + why + '.';
}

/** Notifications longer than this are cut by JupyterLab. */
export const NOTIFICATION_MAX = 140;

/** Tells one warning from the next (a new warning is shown again). */
export function warningKey(w: IWarning): string {
  return w.claim + '@' + w.cull_at;
}

export function lostKernelsMessage(ev: ILostKernels): string {
  return (
    (ev.count === 1 ? 'A kernel was' : ev.count + ' kernels were') +
    ' lost: ' +
    ev.reason +
    '. Restart it from the Kernel menu.'
  );
}

/** While someone waits: " (while another user waits for this size, only until 13:20)". */
function contended(until: number | null | undefined): string {
  return until ? ' (while another user waits for this size, only until ' + clock(until) + ')' : '';
}

/** What Keep answered: "Your GPU is kept until 15:05 (while another user waits ...)." */
export function keptMessage(
  keptUntil: number | null | undefined,
  contendedUntil?: number | null
): string {
  return (
    'Your GPU is kept' +
    (keptUntil ? ' until ' + clock(keptUntil) : '') +
    contended(contendedUntil) +
    '.'
  );
}

/** How long Keep holds, said with the warning: "Keep my GPU holds it until 15:05; ...". */
export function keepHoldsText(w: IWarning): string {
  return w.keep_until
    ? ' Keep my GPU holds it until ' +
        clock(w.keep_until) +
        contended(w.keep_contended_until) +
        '; it answers this warning once.'
    : '';
}

/** The refusal's own words, else its HTTP status. */
export function refusal(
  what: string,
  status: number,
  body: { message?: string } | null | undefined
): string {
  return 'Could not ' + what + ': ' + ((body && body.message) || 'error ' + status);
}

/** Used over total GPU memory ("2.1 / 9.8 GiB"), or null when the total is unknown. */
export function memory(d: IReading): string | null {
  const s = d.summary || {};
  return s.memory_total
    ? gib(s.memory_used) + ' / ' + gib(s.memory_total) + ' GiB'
    : null;
}

/** The status bar item: "MIG 1g.10gb · 2.1 / 9.8 GiB · kept · idle: release at 14:05". */
export function gpuLine(d: IReading): string {
  const st = d.state || {};
  const parts = [(d.session && d.session.gpu) || 'GPU'];
  if (st.health && !st.health.ok) {
    parts.push('GPU FAILED: release it');
  }
  parts.push(memory(d) || 'memory ?');
  parts.push(st.keep_on_stop ? 'kept' : 'not kept');
  if (st.warning) {
    parts.push(
      'idle: release ' +
        (st.warning.cull_at ? 'at ' + clock(st.warning.cull_at) : 'soon')
    );
  }
  return parts.join(DOT);
}

function activity(x: IDevice): string {
  if (x.activity === null || x.activity === undefined) {
    return 'not reported for this device (NVML cannot tell)';
  }
  return (
    Math.round(x.activity) +
    '%' +
    (x.activity_source === 'gpm-sm-activity' ? ' (SM activity)' : '')
  );
}

/** Each device's utilization (whole GPU) or SM activity (MIG with GPM). */
export function utilization(d: IReading): string {
  const devs = d.devices || [];
  return devs.length ? devs.map(activity).join(', ') : '?';
}

/** The panel's "Device" row: "MIG 1g.10gb (pool/device)". */
export function deviceText(d: IReading): string {
  const sess = d.session || {};
  const devs = sess.devices || [];
  return (sess.gpu || '?') + (devs.length ? ' (' + devs.join(', ') + ')' : '');
}

export function keptText(keepOnStop: boolean | undefined): string {
  return keepOnStop
    ? 'yes: stopping the server keeps this GPU for you'
    : 'no: stopping the server releases it';
}

/** "Kept: yes, and held off the culler until 15:05.", or null without a keep. */
export function keptUntilText(
  keptUntil: number | null | undefined,
  contendedUntil?: number | null
): string | null {
  return keptUntil
    ? 'Kept: yes, and held off the culler until ' +
        clock(keptUntil) +
        contended(contendedUntil) +
        '.'
    : null;
}

/** The panel's words for the culler's warning. */
export function panelWarning(w: IWarning): string {
  return (
    'This GPU and its notebook look idle: it will be released ' +
    (w.cull_at ? 'at ' + clock(w.cull_at) : 'soon') +
    (w.reason ? ' (' + w.reason + ')' : '') +
    '.' +
    keepHoldsText(w)
  );
}

export const PARK_QUESTION =
  'Park your session? Your kernels\' variables are saved to your home folder, this server ' +
  'stops and the GPU goes back to the pool. Start again (on any free GPU of this size) and ' +
  'they are loaded back into new kernels; open files, threads and running cells are not kept.';

/** What the panel and the dialog call giving the GPU back: parking keeps the variables. */
export function releaseLabel(parks: boolean | undefined): string {
  return parks ? 'Park my session' : 'Release my GPU';
}

export const RELEASE_QUESTION =
  'Release your GPU? This server stops, its kernels end, and the GPU goes back ' +
  'to the pool: the next start may get another one.';
