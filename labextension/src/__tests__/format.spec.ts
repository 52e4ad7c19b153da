import {
  clock,
  deviceText,
  gib,
  gpuLine,
  idleMessage,
  keptMessage,
  keptText,
  keptUntilText,
  lostKernelsMessage,
  memory,
  NOTIFICATION_MAX,
  panelWarning,
  refusal,
  utilization,
  warningKey,
  when
} from '../format';
import { IReading } from '../types';

const GIB = Math.pow(2, 30);
// 2150 MiB used of a MIG 1g.10gb's 9.8 GiB (what the browser test's simulated NVML reads)
const reading: IReading = {
  enabled: true,
  session: { gpu: 'MIG 1g.10gb', node: 'n3', claim: 'gpu-wes', devices: ['pool-a/gpu-0-mig-1g-10gb-0'] },
  state: { keep_on_stop: true, claim: 'gpu-wes' },
  summary: { memory_used: 2150 * Math.pow(2, 20), memory_total: 9.8 * GIB },
  devices: [{ activity: 37.4, activity_source: 'utilization' }]
};

describe('gib', () => {
  it('shows one decimal', () => {
    expect(gib(2150 * Math.pow(2, 20))).toBe('2.1');
    expect(gib(0)).toBe('0.0');
    expect(gib(80 * GIB)).toBe('80.0');
  });
  it('says ? when unknown', () => {
    expect(gib(null)).toBe('?');
    expect(gib(undefined)).toBe('?');
  });
});

describe('clock and when', () => {
  const ts = Date.UTC(2026, 11, 2, 14, 5) / 1000;
  it('is a time of day', () => {
    expect(clock(ts)).toMatch(/\d\d.\d\d/);
  });
  it('says when, and in how many minutes', () => {
    expect(when(ts, (ts - 12 * 60) * 1000)).toBe('at ' + clock(ts) + ' (in 12 min)');
  });
  it('never counts minutes below zero', () => {
    expect(when(ts, (ts + 600) * 1000)).toBe('at ' + clock(ts) + ' (in 0 min)');
  });
  it('says soon without a time', () => {
    expect(when(null)).toBe('soon');
    expect(when(0)).toBe('soon');
  });
});

describe('the status bar line', () => {
  it('has the device, the memory and kept', () => {
    expect(gpuLine(reading)).toBe('MIG 1g.10gb \u00b7 2.1 / 9.8 GiB \u00b7 kept');
  });
  it('says not kept when stopping releases the GPU', () => {
    expect(gpuLine({ ...reading, state: { keep_on_stop: false } })).toBe(
      'MIG 1g.10gb \u00b7 2.1 / 9.8 GiB \u00b7 not kept'
    );
  });
  it('adds the culler warning with its time', () => {
    const cull = Date.UTC(2026, 11, 2, 14, 5) / 1000;
    const d = { ...reading, state: { keep_on_stop: true, warning: { cull_at: cull } } };
    expect(gpuLine(d)).toBe('MIG 1g.10gb \u00b7 2.1 / 9.8 GiB \u00b7 kept \u00b7 idle: release at ' + clock(cull));
  });
  it('says soon for a warning without a time', () => {
    const d = { ...reading, state: { keep_on_stop: true, warning: { cull_at: null } } };
    expect(gpuLine(d)).toMatch(/ \u00b7 idle: release soon$/);
  });
  it('says what it does not know', () => {
    expect(gpuLine({ enabled: true })).toBe('GPU \u00b7 memory ? \u00b7 not kept');
    expect(memory({ enabled: true, summary: { memory_used: 5, memory_total: null } })).toBeNull();
  });
});

describe('the idle warning', () => {
  const cull = 1_800_000_000;
  it('names the size, the time and the reason', () => {
    const w = { profile: 'mig-1g-10gb', cull_at: cull, reason: 'notebook and GPU idle for 1.8 h' };
    expect(idleMessage(w, (cull - 300) * 1000)).toBe(
      'Idle GPU (mig-1g-10gb) will be released at ' + clock(cull) + ' (in 5 min): notebook and GPU idle for 1.8 h.'
    );
  });
  it('fits in a notification', () => {
    const w = { profile: 'mig-1g-10gb', cull_at: cull, reason: 'notebook and GPU idle for 1.8 h' };
    expect(idleMessage(w).length).toBeLessThanOrEqual(NOTIFICATION_MAX);
  });
  it('is short without a size or a reason', () => {
    expect(idleMessage({})).toBe('Idle GPU will be released soon.');
  });
  it('is a new warning when the cull time changes', () => {
    expect(warningKey({ claim: 'gpu-wes', cull_at: 1 })).not.toBe(warningKey({ claim: 'gpu-wes', cull_at: 2 }));
    expect(warningKey({ claim: 'gpu-wes', cull_at: 1 })).toBe(warningKey({ claim: 'gpu-wes', cull_at: 1 }));
  });
  it('reads in the panel', () => {
    expect(panelWarning({ cull_at: cull, reason: 'notebook and GPU idle for 1.8 h' })).toBe(
      'This GPU and its notebook look idle: it will be released at ' +
        clock(cull) +
        ' (notebook and GPU idle for 1.8 h).'
    );
    expect(panelWarning({})).toBe('This GPU and its notebook look idle: it will be released soon.');
  });
  it('says in the panel how long a keep would hold', () => {
    const keep = cull + 4 * 3600;
    const contended = cull + 60;
    expect(panelWarning({ cull_at: cull, keep_until: keep })).toBe(
      'This GPU and its notebook look idle: it will be released at ' +
        clock(cull) +
        '. Keep my GPU holds it until ' +
        clock(keep) +
        '; it answers this warning once.'
    );
    expect(panelWarning({ cull_at: cull, keep_until: keep, keep_contended_until: contended })).toContain(
      'until ' + clock(keep) + ' (while another user waits for this size, only until ' + clock(contended) + ')'
    );
  });
});

describe('the panel rows', () => {
  it('shows the device with pool/device', () => {
    expect(deviceText(reading)).toBe('MIG 1g.10gb (pool-a/gpu-0-mig-1g-10gb-0)');
    expect(deviceText({ enabled: true, session: { gpu: 'H100' } })).toBe('H100');
    expect(deviceText({ enabled: true })).toBe('?');
  });
  it('shows utilization per device', () => {
    expect(utilization(reading)).toBe('37%');
    expect(utilization({ enabled: true, devices: [{ activity: 12.6, activity_source: 'gpm-sm-activity' }] })).toBe(
      '13% (SM activity)'
    );
    expect(utilization({ enabled: true, devices: [{ activity: null }] })).toBe(
      'not reported for this device (NVML cannot tell)'
    );
    expect(utilization({ enabled: true, devices: [{ activity: 1 }, { activity: 99 }] })).toBe('1%, 99%');
    expect(utilization({ enabled: true })).toBe('?');
  });
  it('says whether the GPU is kept across restarts', () => {
    expect(keptText(true)).toBe('yes: stopping the server keeps this GPU for you');
    expect(keptText(false)).toBe('no: stopping the server releases it');
    expect(keptText(undefined)).toBe('no: stopping the server releases it');
  });
  it('says until when a keep holds off the culler', () => {
    const until = 1_800_000_000;
    expect(keptUntilText(until)).toBe('Kept: yes, and held off the culler until ' + clock(until) + '.');
    expect(keptUntilText(null)).toBeNull();
    expect(keptUntilText(until, until - 600)).toBe(
      'Kept: yes, and held off the culler until ' +
        clock(until) +
        ' (while another user waits for this size, only until ' +
        clock(until - 600) +
        ').'
    );
  });
});

describe('other words', () => {
  it('counts lost kernels', () => {
    expect(lostKernelsMessage({ at: 1, count: 1, reason: 'the GPU holder restarted' })).toBe(
      'A kernel was lost: the GPU holder restarted. Restart it from the Kernel menu.'
    );
    expect(lostKernelsMessage({ at: 1, count: 3, reason: 'x' })).toBe(
      '3 kernels were lost: x. Restart it from the Kernel menu.'
    );
  });
  it('answers a keep', () => {
    expect(keptMessage(1_800_000_000)).toBe('Your GPU is kept until ' + clock(1_800_000_000) + '.');
    expect(keptMessage(null)).toBe('Your GPU is kept.');
    expect(keptMessage(1_800_000_000, 1_799_990_000)).toBe(
      'Your GPU is kept until ' +
        clock(1_800_000_000) +
        ' (while another user waits for this size, only until ' +
        clock(1_799_990_000) +
        ').'
    );
  });
  it("gives a refusal in the hub's words, else its status", () => {
    expect(refusal('keep your GPU', 409, { message: 'Your GPU is being released' })).toBe(
      'Could not keep your GPU: Your GPU is being released'
    );
    expect(refusal('keep your GPU', 502, {})).toBe('Could not keep your GPU: error 502');
    expect(refusal('keep your GPU', 502, null)).toBe('Could not keep your GPU: error 502');
  });
});
