// The tasks the page knows, keyed by id: from the event stream and from the listings it
// fetched. Changes only mark tasks dirty; the page draws them at the next animation frame.

/// How long a deleted id is remembered.
const DELETED_MS = 60_000;

/// The page's clocks: `monotonic` (performance.now) and `wall` (Date.now), in milliseconds.
const SYSTEM_CLOCK = { monotonic: () => performance.now(), wall: () => Date.now() };

export class TaskModel {
  /// `clock`: the clocks it reads (the unit tests give their own).
  constructor(clock = SYSTEM_CLOCK) {
    this.clock = clock;
    this.tasks = new Map();
    /// Ids of tasks changed since the last frame.
    this.dirty = new Set();
    /// Ids the event stream has sent (so past the stream's min_duration hold-back).
    this.streamed = new Set();
    /// When (performance.now) each task was first seen finished.
    this.finishedSeen = new Map();
    /// Child ids by parent id.
    this.children = new Map();
    /// Ids of tasks known to have children (also those whose children are not kept).
    this.parents = new Set();
    /// Ids deleted lately, with when (performance.now): a listing that started before the
    /// delete and arrives after it must not bring them back.
    this.deleted = new Map();
  }

  /// Remembers that `id` was deleted (for DELETED_MS) and forgets the task.
  markDeleted(id) {
    this.deleted.set(id, this.clock.monotonic());
    this.remove(id);
  }

  /// Whether `id` was deleted within the last DELETED_MS.
  wasDeleted(id) {
    const at = this.deleted.get(id);
    if (at === undefined) return false;
    if (this.clock.monotonic() - at < DELETED_MS) return true;
    this.deleted.delete(id);
    return false;
  }

  get(id) { return this.tasks.get(id); }

  /// Stores `task` unless what is stored is newer; returns whether it changed anything.
  put(task, fromStream) {
    const old = this.tasks.get(task.id);
    if (fromStream) this.streamed.add(task.id);
    if (old && old.updated_at > task.updated_at) return false;
    if (old && old.parent_id !== task.parent_id) this.children.get(old.parent_id)?.delete(task.id);
    if (task.parent_id) {
      this.parents.add(task.parent_id);
      if (!this.children.has(task.parent_id)) this.children.set(task.parent_id, new Set());
      this.children.get(task.parent_id).add(task.id);
    }
    this.tasks.set(task.id, task);
    if (task.finished_at && !this.finishedSeen.has(task.id)) {
      const age = this.clock.wall() - Date.parse(task.finished_at);
      this.finishedSeen.set(task.id, this.clock.monotonic() - Math.max(0, age));
    }
    this.dirty.add(task.id);
    return true;
  }

  remove(id) {
    const old = this.tasks.get(id);
    if (old?.parent_id) this.children.get(old.parent_id)?.delete(id);
    this.tasks.delete(id);
    this.streamed.delete(id);
    this.finishedSeen.delete(id);
    this.dirty.add(id);
  }

  /// Forgets every task `keep` does not want (the page shows only so many; the rest are
  /// fetched again when needed), and the child ids of parents no longer known.
  prune(keep) {
    for (const [id, task] of this.tasks) if (!keep(task)) this.remove(id);
    for (const id of this.streamed) if (!this.tasks.has(id)) this.streamed.delete(id);
    for (const id of this.finishedSeen.keys()) if (!this.tasks.has(id)) this.finishedSeen.delete(id);
    for (const [id, set] of this.children) if (set.size === 0 || !this.tasks.has(id)) this.children.delete(id);
    for (const id of this.parents) if (!this.tasks.has(id)) this.parents.delete(id);
    for (const id of this.dirty) if (!this.tasks.has(id)) this.dirty.delete(id);
    const now = this.clock.monotonic();
    for (const [id, at] of this.deleted) if (now - at >= DELETED_MS) this.deleted.delete(id);
    if (this.deleted.size > 10_000) this.deleted = new Map([...this.deleted].slice(-10_000));
  }

  childrenOf(id) {
    const children = [];
    for (const child of this.children.get(id) ?? []) {
      const task = this.tasks.get(child);
      if (task) children.push(task);
    }
    return children.sort(newestFirst);
  }

  takeDirty() {
    const dirty = this.dirty;
    this.dirty = new Set();
    return dirty;
  }
}

export function newestFirst(a, b) {
  return a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : a.id < b.id ? 1 : -1;
}

/// Whether a task has children: the server's `children` counts say so, one is known, or a
/// task with a fraction but no total (only a parent's roll-up is quantified without one).
export function hasChildren(model, task) {
  if ((task.children?.total ?? 0) > 0) return true;
  if (task.mode === "quantified" && task.total === null) return true;
  return model.parents.has(task.id) || (model.children.get(task.id)?.size ?? 0) > 0;
}
