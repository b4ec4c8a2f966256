package contract

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The lexer of a command line: SplitWords, and the quoting of words that
// reads back through it (shellQuote) or shows them in an error line
// (quoteArg).

// MaxCommandLen bounds an exec command in bytes. Every valid command is far
// shorter; the bound keeps a hostile megabyte from costing more than a length
// check.
const MaxCommandLen = 4096

// SplitWords splits an exec command into words the way a POSIX shell would,
// minus everything a shell does besides quoting, because OpenSSH hands the
// server one string and callers quote their arguments for a remote shell:
//
//   - Spaces and tabs separate words. An unquoted CR or LF ends the command:
//     only spaces, tabs, CRs and LFs may follow it (a client may append a
//     newline), since another word would be a second command to a shell and
//     we run exactly one. CR and LF inside quotes or after a backslash, and
//     every other control character but tab, anywhere, are errors: no valid
//     argument holds one, and they would forge lines in logs.
//   - '...' is literal. "..." is literal except that a backslash escapes
//     " \ $ and ` (and is kept before anything else). Outside quotes a
//     backslash escapes the next byte; a trailing one is an error.
//   - Adjacent parts concatenate: 'acme'/"widgets" is acme/widgets.
//   - No expansion, globbing, comments or operators: $, *, #, ; and the like
//     are ordinary characters (the grammar rejects them where they matter;
//     "#42" is an issue, not a comment).
//   - An empty word (a pair of quotes with nothing between) is an error: no
//     argument may be empty, and a silently dropped one would shift the
//     others.
//   - A line longer than MaxCommandLen bytes is an error.
//
// An empty or blank line gives no words and no error.
func SplitWords(line string) ([]string, error) {
	if len(line) > MaxCommandLen {
		return nil, usageErrorf("command too long (over %d bytes)", MaxCommandLen)
	}
	controlErr := func(c byte) error {
		return usageErrorf("command contains a control character (0x%02x)", c)
	}
	plain := true // nothing but words and blanks: no quote, backslash or line end
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f:
			return nil, controlErr(c)
		case c == '\\' || c == '\'' || c == '"' || c == '\r' || c == '\n':
			plain = false
		}
	}
	if plain {
		// The common line, split without copying its words.
		words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(words) == 0 {
			return nil, nil
		}
		return words, nil
	}
	isLineEnd := func(c byte) bool { return c == '\r' || c == '\n' }

	var words []string
	var cur strings.Builder
	inWord := false
	ended := false // an unquoted CR or LF was seen: only blanks may follow
	endWord := func() error {
		if cur.Len() == 0 {
			return usageErrorf(`empty argument ('' or "")`)
		}
		words = append(words, cur.String())
		cur.Reset()
		inWord = false
		return nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		if c == ' ' || c == '\t' || isLineEnd(c) {
			if inWord {
				if err := endWord(); err != nil {
					return nil, err
				}
			}
			ended = ended || isLineEnd(c)
			i++
			continue
		}
		if ended {
			return nil, usageErrorf("command spans more than one line")
		}
		inWord = true
		switch c {
		case '\\':
			if i+1 == len(line) {
				return nil, usageErrorf("command ends in a backslash")
			}
			if isLineEnd(line[i+1]) {
				return nil, controlErr(line[i+1])
			}
			cur.WriteByte(line[i+1])
			i += 2
		case '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, usageErrorf("unclosed single quote in %s", quoteArg(line[i:]))
			}
			part := line[i+1 : i+1+j]
			if k := strings.IndexAny(part, "\r\n"); k >= 0 {
				return nil, controlErr(part[k])
			}
			cur.WriteString(part)
			i += j + 2
		case '"':
			open := i
			i++
			for {
				if i == len(line) {
					return nil, usageErrorf("unclosed double quote in %s", quoteArg(line[open:]))
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if isLineEnd(c) {
					return nil, controlErr(c)
				}
				if c == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					cur.WriteByte(line[i+1])
					i += 2
					continue
				}
				cur.WriteByte(c)
				i++
			}
		default:
			cur.WriteByte(c)
			i++
		}
	}
	if inWord {
		if err := endWord(); err != nil {
			return nil, err
		}
	}
	return words, nil
}

// shellQuote writes s as one word SplitWords reads back: bare when it
// holds nothing special, otherwise single-quoted.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ':' ||
			'0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// quoteArg renders a caller's word for an error line: Go-quoted, so the line
// stays one line of printable text, and cut short so a long word cannot
// swamp it.
func quoteArg(s string) string {
	const keep = 64
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
