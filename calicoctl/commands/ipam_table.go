package commands

import (
	"strings"
)

// boxTable is a +---+ bordered table in the style of Calico's calicoctl:
// headings centred, cells left aligned except the columns in right.
type boxTable struct {
	headers []string
	rows    [][]string
	right   map[int]bool
}

// String renders the table.
func (t boxTable) String() string {
	widths := make([]int, len(t.headers))
	for i, h := range t.headers {
		widths[i] = len(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	var b strings.Builder
	rule := func() {
		b.WriteByte('+')
		for _, w := range widths {
			b.WriteString(strings.Repeat("-", w+2) + "+")
		}
		b.WriteByte('\n')
	}
	rule()
	b.WriteByte('|')
	for i, h := range t.headers {
		pad := widths[i] - len(h)
		b.WriteString(" " + strings.Repeat(" ", pad/2) + h + strings.Repeat(" ", pad-pad/2) + " |")
	}
	b.WriteByte('\n')
	rule()
	for _, r := range t.rows {
		b.WriteByte('|')
		for i, w := range widths {
			pad := strings.Repeat(" ", w-len(r[i]))
			if t.right[i] {
				b.WriteString(" " + pad + r[i] + " |")
			} else {
				b.WriteString(" " + r[i] + pad + " |")
			}
		}
		b.WriteByte('\n')
	}
	rule()
	return b.String()
}
