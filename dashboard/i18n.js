// The page's words in English and Korean, and every number, unit and duration formatted
// with Intl in the language chosen.

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
    searchByLabel: "Search by",
    searchById: "Id",
    searchByName: "Name",
    searchLabel: "Starts with",
    searchPlaceholder: "Starts with…",
    searchHintId: "Searches every page by id prefix.",
    searchHintName: "Filters this page only by name prefix.",
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
    noNameMatch: "No task on this page has a name starting with “{name}”.",
    pages: "Pages",
    previous: "Previous",
    next: "Next",
    pageOf: "Page {page} of {pages}",
    back: "← All tasks",
    history: "History",
    zoomIn: "Zoom in",
    zoomOut: "Zoom out",
    points: "Detail: up to {count} points",
    chartCaption: "Fraction done (0 to 100%) from {from} to {to}, {count} points",
    chartEmpty: "No progress recorded yet.",
    fields: "Fields",
    children: "Children",
    noChildren: "No children.",
    connecting: "Connecting…",
    live: "Live",
    reconnecting: "Reconnecting…",
    offlineSince: "Offline since {time}",
    cancel: "Cancel",
    cancelConfirm: "Cancel “{name}”?",
    cancelYes: "Yes, cancel",
    cancelNo: "Keep running",
    canceling: "Canceling…",
    cancelFailed: "Cancel failed: {detail}",
    expand: "Show children of {name}",
    collapse: "Hide children of {name}",
    childCount: "Children",
    details: "Details",
    working: "Working",
    ofTotal: "{completed} of {total}",
    rate: "{rate}/s",
    etaLeft: "About {duration} left",
    valueText: "{percent} percent",
    valueTextEta: "{percent} percent, about {duration} left",
    stalledSilent: "No signal for {age}",
    stalledNoProgress: "No progress for {age}",
    state_pending: "Pending",
    state_running: "Running",
    state_succeeded: "Succeeded",
    state_failed: "Failed",
    state_canceled: "Canceled",
    stalled: "Stalled",
    announceFinished: "{name}: {state}",
    announceStalled: "{name} stalled",
    announceRecovered: "{name} is moving again",
    loadFailed: "Could not load tasks: {detail}",
    field_id: "Id", field_name: "Name", field_state: "State", field_label: "Label", field_progress: "Progress",
    field_rate: "Rate", field_eta: "Time left", field_parent: "Parent", field_created: "Created",
    field_updated: "Updated", field_finished: "Finished", field_message: "Message", field_stall: "Stall",
    field_stall_timeout: "Stall timeout", field_cancel: "Cancel requested", yes: "Yes", no: "No", none: "—",
  },
  ko: {
    title: "Headway",
    hideShorter: "다음보다 짧은 작업 숨기기",
    secondsUnit: "초",
    language: "언어",
    tokenTitle: "이 서버는 액세스 토큰이 필요합니다",
    tokenHelp: "read 범위가 있는 토큰을 붙여 넣으세요. 이 탭에만 보관됩니다.",
    tokenLabel: "액세스 토큰",
    tokenSubmit: "토큰 사용",
    tokenRefused: "서버가 이 토큰을 거부했습니다: {detail}",
    tokenMalformed: "토큰은 hw_로 시작하고 46자입니다.",
    filters: "보기",
    filterRunning: "진행 중",
    filterStalled: "멈춤",
    filterFailed: "실패",
    filterFinished: "완료됨",
    filterAll: "전체",
    searchByLabel: "검색 기준",
    searchById: "ID",
    searchByName: "이름",
    searchLabel: "시작 문자",
    searchPlaceholder: "시작 문자…",
    searchHintId: "모든 페이지에서 ID 앞부분으로 검색합니다.",
    searchHintName: "이 페이지에서만 이름 앞부분으로 거릅니다.",
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
    noNameMatch: "이 페이지에는 이름이 “{name}”(으)로 시작하는 작업이 없습니다.",
    pages: "페이지",
    previous: "이전",
    next: "다음",
    pageOf: "{pages}페이지 중 {page}페이지",
    back: "← 모든 작업",
    history: "기록",
    zoomIn: "확대",
    zoomOut: "축소",
    points: "해상도: 최대 {count}개 점",
    chartCaption: "{from}부터 {to}까지의 진행률(0–100%), 점 {count}개",
    chartEmpty: "아직 기록된 진행이 없습니다.",
    fields: "필드",
    children: "하위 작업",
    noChildren: "하위 작업이 없습니다.",
    connecting: "연결 중…",
    live: "실시간",
    reconnecting: "다시 연결 중…",
    offlineSince: "{time}부터 오프라인",
    cancel: "취소",
    cancelConfirm: "“{name}” 작업을 취소할까요?",
    cancelYes: "예, 취소",
    cancelNo: "계속 실행",
    canceling: "취소 중…",
    cancelFailed: "취소 실패: {detail}",
    expand: "{name}의 하위 작업 보기",
    collapse: "{name}의 하위 작업 숨기기",
    childCount: "하위 작업",
    details: "자세히",
    working: "작업 중",
    ofTotal: "{total} 중 {completed}",
    rate: "초당 {rate}",
    etaLeft: "약 {duration} 남음",
    valueText: "{percent}퍼센트",
    valueTextEta: "{percent}퍼센트, 약 {duration} 남음",
    stalledSilent: "{age} 동안 신호 없음",
    stalledNoProgress: "{age} 동안 진행 없음",
    state_pending: "대기 중",
    state_running: "진행 중",
    state_succeeded: "성공",
    state_failed: "실패",
    state_canceled: "취소됨",
    stalled: "멈춤",
    announceFinished: "{name}: {state}",
    announceStalled: "{name} 멈춤",
    announceRecovered: "{name} 다시 진행 중",
    loadFailed: "작업을 불러오지 못했습니다: {detail}",
    field_id: "ID", field_name: "이름", field_state: "상태", field_label: "레이블", field_progress: "진행",
    field_rate: "속도", field_eta: "남은 시간", field_parent: "상위 작업", field_created: "생성",
    field_updated: "갱신", field_finished: "종료", field_message: "메시지", field_stall: "멈춤",
    field_stall_timeout: "멈춤 기준", field_cancel: "취소 요청됨", yes: "예", no: "아니요", none: "—",
  },
};

export const LANGUAGES = Object.keys(STRINGS);
let language = "en";
let formats = null;

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
    units: {},
  };
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

/// The string `key` with `{name}` replaced from `values`.
export function t(key, values = {}) {
  const text = STRINGS[language][key] ?? STRINGS.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(values[name] ?? ""));
}

export const formatInteger = (value) => formats.integer.format(value);
export const formatNumber = (value) => formats.number.format(value);
export const formatPercent = (fraction) => formats.percent.format(Math.floor(fraction * 100));
export const formatPercentText = (fraction) => formats.percentText.format(Math.floor(fraction * 100) / 100);
export const formatClock = (date) => formats.time.format(date);
export const formatDateTime = (date) => formats.dateTime.format(date);

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
