/**
 * What the notebook server sends (gpusessions.notebook.handlers and gpustatus).
 */

/** The notebook pod's own variables: the device, the node and the claim. */
export interface ISession {
  gpu?: string;
  profile?: string;
  node?: string;
  claim?: string;
  devices?: string[];
}

/** The culler's warning about this server's GPU. */
export interface IWarning {
  claim?: string;
  profile?: string;
  reason?: string;
  /** When the culler releases the GPU (seconds since the epoch), if it said. */
  cull_at?: number | null;
  /** Until when a keep pressed now holds, with nobody waiting for this size. */
  keep_until?: number | null;
  /** Until when it holds while another user waits for this size (counted from the warning). */
  keep_contended_until?: number | null;
}

/** The hub's side: kept across stops or not, the warning, a keep in force. */
export interface IHubState {
  claim?: string;
  keep_on_stop?: boolean;
  kept_until?: number | null;
  /** The keep in force holds only until then while another user waits for this size. */
  kept_contended_until?: number | null;
  warning?: IWarning | null;
  /** The GPU's health: not ok when the driver tainted its device (an XID, a lost GPU). */
  health?: IHealth;
  error?: string;
}

export interface IHealth {
  ok: boolean;
  message: string;
}

export interface ISummary {
  memory_used?: number | null;
  memory_total?: number | null;
  utilization?: number | null;
}

export interface IDevice {
  uuid?: string;
  activity?: number | null;
  activity_source?: string | null;
}

export interface IKernel {
  id: string;
  name?: string | null;
  path?: string | null;
  execution_state?: string | null;
  gpu_memory?: number | null;
}

/** One reading of the GPU event stream (<base>/gpusessions/gpu/events). */
export interface IReading {
  enabled: boolean;
  at?: number;
  session?: ISession;
  state?: IHubState;
  summary?: ISummary;
  devices?: IDevice[];
  /** null: kernels run in the notebook server, not in the holder. */
  kernels?: IKernel[] | null;
  kernels_error?: string | null;
  agent_error?: string | null;
  /** The holder parks the kernels when the GPU goes (their variables come back at the next start). */
  parks?: boolean;
  /** The last parked session's restore into this server's kernels. */
  restore?: IRestore;
}

/** <base>/gpusessions/restore's answer, also in each reading. */
export interface IRestore {
  state: 'none' | 'pending' | 'restoring' | 'restored' | 'failed' | 'expired' | string;
  message?: string;
  parked_at?: string | number | null;
}

/** A notice from the hub (why this server stopped, say). */
export interface INotice {
  at: number | string;
  text: string;
  level?: string;
  /** `gpu-health`: the GPU is broken (the GPU panel's stream tells it too). */
  kind?: string;
}

export interface ILostKernels {
  at: number | string;
  count: number;
  reason: string;
}

/** <base>/gpusessions/warnings */
export interface IWarnings {
  enabled?: boolean;
  poll_seconds?: number;
  warnings?: IWarning[];
  notices?: INotice[];
  lost_kernels?: ILostKernels[];
  error?: string;
}

/** A request's outcome: the body is {} when it was not JSON. */
export interface IReply<T = Record<string, any>> {
  ok: boolean;
  status: number;
  body: T;
}
