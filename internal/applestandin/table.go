package main

import "strings"

// renderTable lays rows out like the CLI's TableOutput: every column but
// the last is padded to its widest cell plus two spaces; the last column is
// not padded; rows are joined by newlines (the caller prints one more).
func renderTable(rows [][]string) string {
	if len(rows) == 0 {
		return ""
	}
	cols := len(rows[0])
	width := make([]int, cols)
	for _, r := range rows {
		for i := 0; i < cols && i < len(r); i++ {
			if n := len(r[i]); n > width[i] {
				width[i] = n
			}
		}
	}
	var b strings.Builder
	for ri, r := range rows {
		if ri > 0 {
			b.WriteByte('\n')
		}
		for i := 0; i < cols; i++ {
			cell := ""
			if i < len(r) {
				cell = r[i]
			}
			b.WriteString(cell)
			if i < cols-1 {
				b.WriteString(strings.Repeat(" ", width[i]-len(cell)+2))
			}
		}
	}
	return b.String()
}
