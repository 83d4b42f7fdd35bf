// The page's words in English and Korean, and every number, unit and duration formatted
// with Intl in the language chosen. The Korean was read as a native reader would: names
// in accessible labels come first ("사진 백업 취소", object before verb), and a stalled task
// is 정체 (stuck though it should move), not 멈춤, which reads as paused on purpose.

import { percentOf } from "./facts.js";

const STRINGS = {
  en: {
    title: "Headway",
    hideShorter: "Hide tasks shorter than",
    secondsUnit: "s",
    language: "Language",
    tokenTitle: "This server needs an access token",
    tokenHelp: "Paste a token with the read scope. It is kept in this tab only.",
    tokenLabel: "Access token",
    tokenSubmit: "Use token",
    tokenRefused: "The server refused this token: {detail}",
    tokenMalformed: "A token starts with hw_ and has 46 characters.",
    filters: "Show",
    filterRunning: "Running",
    filterStalled: "Stalled",
    filterFailed: "Failed",
    filterFinished: "Finished",
    filterAll: "All",
    searchLabel: "Search",
    searchPlaceholder: "Name or id…",
    searchHint: "Searches every page for a name or id containing the text.",
    noSearchMatch: "No task’s name or id contains “{q}”.",
    tabCount_one: "{label}, {count} task",
    tabCount_other: "{label}, {count} tasks",
    newTask: "1 new task",
    newTasks: "{count} new tasks",
    signedOut: "Needs a token",
    tokenNoRead: "This token cannot read tasks. Paste one with the read scope.",
    detailUnavailable: "Task not shown",
    taskMissing: "There is no task “{id}” (it may have been deleted).",
    taskHidden: "This token may not see the task “{id}”.",
    badLink: "This link does not name a task.",
    tasks: "Tasks",
    empty: "No tasks here.",
    pages: "Pages",
    pagesAbove: "Pages, above the list",
    previous: "Previous",
    next: "Next",
    pageOf: "Page {page} of {pages}",
    back: "← All tasks",
    history: "History",
    zoomIn: "Zoom in",
    zoomOut: "Zoom out",
    points_one: "Detail: up to {count} point",
    points_other: "Detail: up to {count} points",
    chartCaption_one: "Fraction done (0 to 100%) from {from} to {to}, {count} point",
    chartCaption_other: "Fraction done (0 to 100%) from {from} to {to}, {count} points",
    output: "Output",
    outputEmpty: "No output yet.",
    chartEmpty: "No progress recorded yet.",
    fields: "Fields",
    children: "Children",
    noChildren: "No children.",
    connecting: "Connecting…",
    live: "Live",
    reconnecting: "Reconnecting…",
    offlineSince: "Offline since {time}",
    offlineNote: "Offline since {time}: what you see is as of then, and nothing can be canceled until the connection is back.",
    reconnectingNote: "The connection was lost: what you see may be out of date, and nothing can be canceled until it is back.",
    unavailableOffline: "Unavailable while offline",
    cancel: "Cancel",
    cancelNamed: "Cancel {name}",
    cancelingNamed: "Canceling {name}…",
    cancelConfirm: "Cancel “{name}”?",
    cancelYes: "Yes, cancel",
    cancelNo: "Keep running",
    canceling: "Canceling…",
    cancelFailed: "Cancel failed: {detail}",
    terminate: "Terminate",
    terminateNamed: "Terminate {name}",
    terminateConfirm: "The cancel got no answer. Terminate “{name}”? It is marked canceled without waiting for its runner.",
    terminateYes: "Yes, terminate",
    terminateFailed: "Terminate failed: {detail}",
    errorUnreachable: "the server could not be reached",
    errorToken: "the token was refused",
    errorForbidden: "this token may not do that",
    errorMissing: "the task no longer exists",
    errorFinished: "the task has already finished",
    errorBusy: "the server is busy; try again shortly",
    errorStatus: "the server answered {status}",
    expand: "Show children of {name}",
    collapse: "Hide children of {name}",
    childCount: "Children",
    details: "Details",
    working: "Working",
    ofTotal: "{completed} of {total}",
    ofTotalUnit: "{completed} of {total} {unit}",
    rate: "{rate}/s",
    etaLeft: "About {duration} left",
    valueText: "{percent} percent",
    valueTextEta: "{percent} percent, about {duration} left",
    stalledSilent: "No signal for {age}",
    stalledNoProgress: "No progress for {age}",
    runningFor: "Running for {duration}",
    pendingFor: "Waiting for {duration}",
    lastSignal: "last signal {age} ago",
    endedAt: "Ended {time} · ran {duration}",
    ago: "{age} ago",
    badge_attention_failed: "Part failed",
    badge_attention_stalled: "Part stalled",
    childrenFailed: "{count} of {total} failed",
    childrenDone: "{count} of {total} done",
    childrenCanceled: "{count} canceled",
    childrenStalled: "{count} stalled",
    deepFailed: "a task further down failed",
    deepStalled: "a task further down stalled",
    state_pending: "Pending",
    state_running: "Running",
    state_succeeded: "Succeeded",
    state_failed: "Failed",
    state_canceled: "Canceled",
    stalled: "Stalled",
    overdue: "Overdue",
    overdueFor: "Overdue by {age}",
    endedLate: "Ended {age} late",
    tooQuick: "Too quick: under {age}",
    announceFinished: "{name}: {state}",
    announceStalled: "{name} stalled",
    announceRecovered: "{name} is moving again",
    announceOverdue: "{name} is overdue",
    announceTooQuick: "{name} finished too quickly",
    loadFailed: "Could not load tasks: {detail}",
    field_id: "Id", field_name: "Name", field_state: "State", field_label: "Label", field_progress: "Progress",
    field_rate: "Rate", field_eta: "Time left", field_parent: "Parent", field_created: "Created",
    field_updated: "Updated", field_finished: "Finished", field_message: "Message", field_stall: "Stall",
    field_stall_timeout: "Stall timeout", field_cancel: "Cancel requested", field_ran: "Ran for",
    field_last_signal: "Last signal", field_children: "Children", yes: "Yes", no: "No", none: "—",
    field_run_time: "Run time", onTime: "On time", field_expected: "Expected run", field_deadline: "Deadline",
    field_min: "Shortest run",
  },
  ko: {
    title: "Headway",
    hideShorter: "숨길 작업 길이:",
    secondsUnit: "초 미만",
    language: "언어",
    tokenTitle: "이 서버는 액세스 토큰이 필요합니다",
    tokenHelp: "read 범위가 있는 토큰을 붙여 넣으세요. 이 탭에만 보관됩니다.",
    tokenLabel: "액세스 토큰",
    tokenSubmit: "토큰 사용",
    tokenRefused: "서버가 이 토큰을 거부했습니다: {detail}",
    tokenMalformed: "토큰은 hw_로 시작하고 46자입니다.",
    filters: "보기",
    filterRunning: "진행 중",
    filterStalled: "정체",
    filterFailed: "실패",
    filterFinished: "종료됨",
    filterAll: "전체",
    searchLabel: "검색",
    searchPlaceholder: "이름 또는 ID…",
    searchHint: "모든 페이지에서 이름이나 ID에 이 글자가 들어간 작업을 찾습니다.",
    noSearchMatch: "“{q}”: 이름이나 ID에 이 글자가 들어간 작업이 없습니다.",
    tabCount_other: "{label}, 작업 {count}개",
    newTask: "새 작업 1개",
    newTasks: "새 작업 {count}개",
    signedOut: "토큰 필요",
    tokenNoRead: "이 토큰으로는 작업을 읽을 수 없습니다. read 범위가 있는 토큰을 붙여 넣으세요.",
    detailUnavailable: "표시할 수 없는 작업",
    taskMissing: "“{id}” 작업이 없습니다(삭제되었을 수 있습니다).",
    taskHidden: "이 토큰으로는 “{id}” 작업을 볼 수 없습니다.",
    badLink: "이 링크는 작업을 가리키지 않습니다.",
    tasks: "작업",
    empty: "작업이 없습니다.",
    pages: "페이지",
    pagesAbove: "페이지(목록 위)",
    previous: "이전",
    next: "다음",
    pageOf: "{pages}페이지 중 {page}페이지",
    back: "← 모든 작업",
    history: "기록",
    zoomIn: "확대",
    zoomOut: "축소",
    points_other: "세밀도: 점 최대 {count}개",
    chartCaption_other: "{from}부터 {to}까지의 진행률(0–100%), 점 {count}개",
    output: "출력",
    outputEmpty: "아직 출력이 없습니다.",
    chartEmpty: "아직 기록된 진행이 없습니다.",
    fields: "필드",
    children: "하위 작업",
    noChildren: "하위 작업이 없습니다.",
    connecting: "연결 중…",
    live: "실시간",
    reconnecting: "다시 연결 중…",
    offlineSince: "{time}부터 오프라인",
    offlineNote: "{time}부터 오프라인입니다. 보이는 내용은 그때 기준이며, 연결이 돌아올 때까지 취소할 수 없습니다.",
    reconnectingNote: "연결이 끊겼습니다. 보이는 내용이 최신이 아닐 수 있으며, 다시 연결될 때까지 취소할 수 없습니다.",
    unavailableOffline: "오프라인이라 사용할 수 없음",
    cancel: "취소",
    cancelNamed: "{name} 취소",
    cancelingNamed: "{name} 취소 중…",
    cancelConfirm: "“{name}” 작업을 취소할까요?",
    cancelYes: "예, 취소",
    cancelNo: "계속 실행",
    canceling: "취소 중…",
    cancelFailed: "취소하지 못했습니다: {detail}",
    terminate: "강제 종료",
    terminateNamed: "{name} 강제 종료",
    terminateConfirm: "취소에 응답이 없습니다. “{name}” 작업을 강제 종료할까요? 실행기를 기다리지 않고 취소됨으로 표시합니다.",
    terminateYes: "예, 강제 종료",
    terminateFailed: "강제 종료하지 못했습니다: {detail}",
    errorUnreachable: "서버에 연결할 수 없습니다",
    errorToken: "토큰이 거부되었습니다",
    errorForbidden: "이 토큰으로는 할 수 없는 작업입니다",
    errorMissing: "작업이 더 이상 없습니다",
    errorFinished: "작업이 이미 끝났습니다",
    errorBusy: "서버가 바쁩니다. 잠시 후 다시 시도하세요",
    errorStatus: "서버 응답 코드 {status}",
    expand: "{name}의 하위 작업 보기",
    collapse: "{name}의 하위 작업 숨기기",
    childCount: "하위 작업",
    details: "자세히",
    working: "작업 중",
    ofTotal: "{total} 중 {completed}",
    // The unit is the runner's own word (often English): "40 중 17 steps" mixes two word
    // orders, while "17/40 steps" reads naturally.
    ofTotalUnit: "{completed}/{total} {unit}",
    rate: "초당 {rate}",
    etaLeft: "약 {duration} 남음",
    valueText: "{percent}퍼센트",
    valueTextEta: "{percent}퍼센트, 약 {duration} 남음",
    stalledSilent: "{age} 동안 신호 없음",
    stalledNoProgress: "{age} 동안 진행 없음",
    runningFor: "{duration}째 진행 중",
    pendingFor: "{duration}째 대기 중",
    lastSignal: "마지막 신호 {age} 전",
    endedAt: "{time} 종료 · 소요 {duration}",
    ago: "{age} 전",
    badge_attention_failed: "일부 실패",
    badge_attention_stalled: "일부 정체",
    childrenFailed: "{total}개 중 {count}개 실패",
    childrenDone: "{total}개 중 {count}개 완료",
    childrenCanceled: "{count}개 취소됨",
    childrenStalled: "{count}개 정체",
    deepFailed: "더 아래 단계에서 실패",
    deepStalled: "더 아래 단계에서 정체",
    state_pending: "대기 중",
    state_running: "진행 중",
    state_succeeded: "성공",
    state_failed: "실패",
    state_canceled: "취소됨",
    stalled: "정체",
    overdue: "기한 초과",
    overdueFor: "{age} 초과",
    endedLate: "{age} 늦게 종료",
    tooQuick: "너무 빨리 종료: {age} 미만",
    announceFinished: "{name}: {state}",
    announceStalled: "{name} 작업 정체",
    announceRecovered: "{name} 작업 다시 진행 중",
    announceOverdue: "{name} 작업 기한 초과",
    announceTooQuick: "{name} 작업이 너무 빨리 끝남",
    loadFailed: "작업을 불러오지 못했습니다: {detail}",
    field_id: "ID", field_name: "이름", field_state: "상태", field_label: "레이블", field_progress: "진행",
    field_rate: "속도", field_eta: "남은 시간", field_parent: "상위 작업", field_created: "생성 시각",
    field_updated: "갱신 시각", field_finished: "종료 시각", field_message: "메시지", field_stall: "정체",
    field_stall_timeout: "정체 판정 시간", field_cancel: "취소 요청됨", field_ran: "소요 시간",
    field_last_signal: "마지막 신호", field_children: "하위 작업", yes: "예", no: "아니요", none: "—",
    field_run_time: "실행 시간", onTime: "제시간", field_expected: "예상 실행 시간", field_deadline: "마감 시각",
    field_min: "최소 실행 시간",
  },
};

export const LANGUAGES = Object.keys(STRINGS);
let language = "en";
let formats = null;
let plurals = null;

/// Chooses the language: `?lang=`, then the one chosen before in this browser, then the
/// browser's own.
export function initialLanguage(search, stored, browser) {
  for (const candidate of [new URLSearchParams(search).get("lang"), stored, (browser || "").slice(0, 2)]) {
    if (candidate && STRINGS[candidate]) return candidate;
  }
  return "en";
}

export function setLanguage(code) {
  language = STRINGS[code] ? code : "en";
  formats = {
    integer: new Intl.NumberFormat(language, { maximumFractionDigits: 0 }),
    number: new Intl.NumberFormat(language, { maximumFractionDigits: 1 }),
    percent: new Intl.NumberFormat(language, { maximumFractionDigits: 0 }),
    percentText: new Intl.NumberFormat(language, { style: "percent", maximumFractionDigits: 0 }),
    time: new Intl.DateTimeFormat(language, { hour: "2-digit", minute: "2-digit" }),
    dateTime: new Intl.DateTimeFormat(language, { dateStyle: "medium", timeStyle: "medium" }),
    shortDateTime: new Intl.DateTimeFormat(language, { dateStyle: "short", timeStyle: "short" }),
    units: {},
  };
  plurals = new Intl.PluralRules(language);
  // Without a document (the unit tests), only the words and formats change.
  if (typeof document === "undefined") return;
  document.documentElement.lang = language;
  for (const element of document.querySelectorAll("[data-i18n]")) element.textContent = t(element.dataset.i18n);
  for (const element of document.querySelectorAll("[data-i18n-placeholder]")) {
    element.placeholder = t(element.dataset.i18nPlaceholder);
  }
  for (const element of document.querySelectorAll("[data-i18n-aria]")) {
    element.setAttribute("aria-label", t(element.dataset.i18nAria));
  }
}

export function currentLanguage() { return language; }

/// The string `key`, in the plural form `count` takes ("1 point", "2 points": `key_one`,
/// `key_other`), with `{name}` replaced from `values` (`count` among them).
export function tn(key, count, values = {}) {
  const form = `${key}_${plurals.select(count)}`;
  const chosen = STRINGS[language][form] !== undefined || STRINGS.en[form] !== undefined ? form : `${key}_other`;
  return t(chosen, { ...values, count: formatInteger(count) });
}

/// The string `key` with `{name}` replaced from `values`.
export function t(key, values = {}) {
  const text = STRINGS[language][key] ?? STRINGS.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(values[name] ?? ""));
}

export const formatInteger = (value) => formats.integer.format(value);
export const formatNumber = (value) => formats.number.format(value);
/// The percent of `fraction` by the one rule (facts.js percentOf): "64", "64%".
export const formatPercent = (fraction) => formats.percent.format(percentOf(fraction));
export const formatPercentText = (fraction) => formats.percentText.format(percentOf(fraction) / 100);
export const formatClock = (date) => formats.time.format(date);
export const formatDateTime = (date) => formats.dateTime.format(date);

/// A moment on a row: its time of day when it was today (local), else its date and time.
export function formatWhen(date, now = new Date()) {
  return date.toDateString() === now.toDateString() ? formats.time.format(date) : formats.shortDateTime.format(date);
}

function unitFormat(unit, display) {
  const key = `${unit}:${display}`;
  formats.units[key] ??= new Intl.NumberFormat(language, { style: "unit", unit, unitDisplay: display, maximumFractionDigits: 0 });
  return formats.units[key];
}

/// A duration in the largest unit that keeps it readable: "42 seconds", "3 minutes",
/// "2 hours", "4 days" (`display` long), or "42 sec", "3 min" (short).
export function formatDuration(seconds, display = "long") {
  const s = Math.max(0, seconds);
  if (s < 60) return unitFormat("second", display).format(Math.floor(s));
  if (s < 3600) return unitFormat("minute", display).format(Math.round(s / 60));
  if (s < 86400 * 2) return unitFormat("hour", display).format(Math.round(s / 3600));
  return unitFormat("day", display).format(Math.round(s / 86400));
}
