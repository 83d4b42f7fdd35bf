/// How many terminal cells text takes, and cutting text to a number of cells. East Asian
/// wide and fullwidth characters and emoji take 2 cells; combining marks, zero-width
/// joiners and variation selectors 0; everything else (block elements included) 1.
/// Text given here must be plain: styles are applied after layout (see `Style`).
public enum DisplayWidth {
    /// The cells `text` takes in a terminal.
    public static func of(_ text: String) -> Int {
        text.reduce(0) { $0 + of($1) }
    }

    /// The cells one grapheme cluster takes: 2 if any of its scalars is wide or it is an
    /// emoji shown as emoji, 0 if all of them are zero-width, else 1.
    public static func of(_ character: Character) -> Int {
        var width = 0
        for scalar in character.unicodeScalars {
            if scalar.value == 0xFE0F || isWide(scalar) { return 2 }
            if !isZeroWidth(scalar) { width = 1 }
        }
        return width
    }

    /// `text` cut to at most `cells` cells, ending in `…` when something was cut.
    public static func truncate(_ text: String, to cells: Int) -> String {
        guard cells > 0 else { return "" }
        if of(text) <= cells { return text }
        var out = "", used = 0
        for character in text {
            let width = of(character)
            if used + width > cells - 1 { break }
            out.append(character)
            used += width
        }
        return out + "…"
    }

    /// `text` followed by spaces up to `cells` cells (unchanged when already that wide).
    public static func pad(_ text: String, to cells: Int) -> String {
        text + String(repeating: " ", count: max(0, cells - of(text)))
    }

    /// `text` safe to print in one line: escape sequences (ESC and what it starts: CSI and
    /// OSC sequences, or one character) removed, tabs, line breaks and other control
    /// characters turned into spaces, and the bidirectional controls (which could make a
    /// line read in another order than it holds) removed. A label from a command's output
    /// may carry colors or a carriage return; none of it must reach the terminal or break
    /// the layout.
    public static func sanitize(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F..<0xA0).contains($0.value) || isBidiControl($0) })
        else { return text }
        var out = String.UnicodeScalarView()
        var scalars = text.unicodeScalars.makeIterator()
        while let scalar = scalars.next() {
            switch scalar.value {
            case 0x1B:
                guard let kind = scalars.next() else { break }
                if kind == "[" {
                    while let next = scalars.next(), !(0x40...0x7E).contains(next.value) {}
                } else if kind == "]" {
                    var previous: Unicode.Scalar = " "
                    while let next = scalars.next(), next.value != 0x07, !(previous.value == 0x1B && next == "\\") { previous = next }
                }
            case 0..<0x20, 0x7F..<0xA0:
                out.append(" ")
            case _ where isBidiControl(scalar):
                break
            default:
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// The explicit bidirectional formatting characters (embeddings, overrides, isolates
    /// and marks).
    static func isBidiControl(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        return (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) || v == 0x200E || v == 0x200F || v == 0x061C
    }

    static func isZeroWidth(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        if v < 0x20 || (0x7F..<0xA0).contains(v) { return true }
        if v == 0x200B || v == 0x200C || v == 0x200D || v == 0x2060 || (0xFE00...0xFE0F).contains(v) { return true }
        if (0xE0100...0xE01EF).contains(v) { return true }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return true
        default: return false
        }
    }

    static func isWide(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        if scalar.properties.isEmojiPresentation { return true }
        return (0x1100...0x115F).contains(v) || (0x2E80...0x303E).contains(v) || (0x3041...0x33FF).contains(v)
            || (0x3400...0x4DBF).contains(v) || (0x4E00...0x9FFF).contains(v) || (0xA000...0xA4CF).contains(v)
            || (0xA960...0xA97F).contains(v) || (0xAC00...0xD7A3).contains(v) || (0xF900...0xFAFF).contains(v)
            || (0xFE10...0xFE19).contains(v) || (0xFE30...0xFE6F).contains(v) || (0xFF00...0xFF60).contains(v)
            || (0xFFE0...0xFFE6).contains(v) || (0x1F300...0x1F64F).contains(v) || (0x1F900...0x1F9FF).contains(v)
            || (0x20000...0x2FFFD).contains(v) || (0x30000...0x3FFFD).contains(v)
    }
}
