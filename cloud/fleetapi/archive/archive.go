// Package archive keeps the fleet's older telemetry as Parquet files, so
// history is measured in days, not in the minutes bbolt holds at fleet scale
// (issue 37: the default 1,000,000 records were 5.5 minutes of an
// 18,000-device fleet, at about 0.9 KB a record).
//
// The fleet store moves records here once they are old enough (or the store
// is over its bound): one file per hour of ingest time and per move, named
//
//	DIR/YYYY-MM-DD/HH-FIRST-LAST.parquet
//
// where FIRST and LAST are the store keys (hex) of the first and last record
// in it. The name is how a move survives a crash: a file is complete once it
// has its name (written to a temporary name, synced, renamed, the directory
// synced), and the store deletes the records only after that; a move that
// finds a file starting with its FIRST key already there deletes up to that
// file's LAST key instead of writing again. So a record is in the store, in
// a file, or (for a moment after a crash) in both with the file winning —
// never in neither, never in two files.
//
// Columns are compressed with zstd and the repeating ones (device, kind)
// dictionary-encoded; docs/fleet-cloud.md gives the bytes per device-hour.
// parquet-go (github.com/parquet-go/parquet-go) writes and reads them; any
// Parquet reader (DuckDB, pandas, Spark) reads them too. The format is a
// contract between the fleet manager, which writes it, and the operator's
// tools (phaselessctl model train), which read it, so it lives beside the
// admin API's types rather than in the manager.
package archive

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/phaseless/phaseless/internal/atomicfile"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Row is one telemetry record as a Parquet row: the export line's fields,
// with the record's own data kept as its JSON text.
type Row struct {
	DeviceID   string `parquet:"device_id,dict,zstd"`
	Seq        uint64 `parquet:"seq,delta,zstd"`
	Time       int64  `parquet:"time,timestamp(nanosecond),delta,zstd"`
	Kind       string `parquet:"kind,dict,zstd"`
	Data       string `parquet:"data,zstd"`
	IngestedAt int64  `parquet:"ingested_at,timestamp(nanosecond),delta,zstd"`
}

// FromExported converts a stored export line's record to a Row.
func FromExported(r *fleetapi.ExportedRecord) Row {
	return Row{DeviceID: r.DeviceID, Seq: r.Seq, Time: nanos(r.Time), Kind: r.Kind,
		Data: string(r.Data), IngestedAt: nanos(r.IngestedAt)}
}

// nanos is t in Unix nanoseconds, 0 for the zero time (which UnixNano
// cannot represent); at reads 0 is the zero time again.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Exported is the row as the fleet's export line (fleetapi.ExportedRecord).
func (r *Row) Exported() fleetapi.ExportedRecord {
	e := fleetapi.ExportedRecord{DeviceID: r.DeviceID, IngestedAt: fromNanos(r.IngestedAt),
		Record: fleetwire.Record{Seq: r.Seq, Time: fromNanos(r.Time), Kind: r.Kind}}
	if r.Data != "" {
		e.Data = json.RawMessage(r.Data)
	}
	return e
}

// Name is the path, relative to the archive directory, of the file holding
// the records from key first to key last, ingested in hour h (UTC).
func Name(h time.Time, first, last []byte) string {
	h = h.UTC()
	return filepath.Join(h.Format("2006-01-02"), fmt.Sprintf("%02d-%x-%x.parquet", h.Hour(), first, last))
}

// Covering looks for a file of hour h whose key range holds key (an
// earlier move that wrote its file, then crashed before or while deleting
// what it moved) and returns its last key, nil when there is none.
func Covering(dir string, h time.Time, key []byte) ([]byte, error) {
	h = h.UTC()
	matches, err := filepath.Glob(filepath.Join(dir, h.Format("2006-01-02"), fmt.Sprintf("%02d-*-*.parquet", h.Hour())))
	if err != nil {
		return nil, err
	}
	for _, m := range matches {
		parts := strings.Split(strings.TrimSuffix(filepath.Base(m), ".parquet"), "-")
		if len(parts) != 3 {
			continue
		}
		first, err1 := hex.DecodeString(parts[1])
		last, err2 := hex.DecodeString(parts[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("archive file %s: not a key range", m)
		}
		if bytes.Compare(first, key) <= 0 && bytes.Compare(key, last) <= 0 {
			return last, nil
		}
	}
	return nil, nil
}

// rowGroup bounds the rows parquet-go buffers before it writes them out,
// so a move of a whole busy hour streams instead of filling memory.
const rowGroup = 64 << 10

// Writer writes one file: rows are streamed to a temporary file, which
// Commit names (complete) and Abort removes.
type Writer struct {
	dir  string
	hour time.Time
	f    *atomicfile.File
	w    *parquet.GenericWriter[Row]
	rows int
}

// Create starts a file of hour h's records in dir.
func Create(dir string, h time.Time) (*Writer, error) {
	sub := filepath.Join(dir, h.UTC().Format("2006-01-02"))
	if err := os.MkdirAll(sub, 0o750); err != nil {
		return nil, err
	}
	// The name is chosen at Commit, once the key range is known; the
	// retention sweep (Retain) removes ".part-" files a killed move left.
	f, err := atomicfile.CreateTemp(sub, ".part-*", "", 0o640)
	if err != nil {
		return nil, err
	}
	w := parquet.NewGenericWriter[Row](f, parquet.Compression(&zstd.Codec{}), parquet.MaxRowsPerRowGroup(rowGroup))
	return &Writer{dir: dir, hour: h, f: f, w: w}, nil
}

// Write appends rows.
func (w *Writer) Write(rows []Row) error {
	n, err := w.w.Write(rows)
	w.rows += n
	return err
}

// Rows is how many rows were written.
func (w *Writer) Rows() int { return w.rows }

// Commit completes the file under its name for the key range first..last
// and returns its size. On error nothing is left behind.
func (w *Writer) Commit(first, last []byte) (int64, error) {
	if err := w.w.Close(); err != nil {
		w.f.Abort()
		return 0, err
	}
	st, err := w.f.Stat()
	if err != nil {
		w.f.Abort()
		return 0, err
	}
	return st.Size(), w.f.CommitAs(filepath.Join(w.dir, Name(w.hour, first, last)))
}

// Abort removes the unfinished file.
func (w *Writer) Abort() { w.f.Abort() }

// Write writes rows to the file for hour h and keys first..last, complete
// under its name or absent, and returns its size.
func Write(dir string, h time.Time, first, last []byte, rows []Row) (int64, error) {
	w, err := Create(dir, h)
	if err != nil {
		return 0, err
	}
	if err := w.Write(rows); err != nil {
		w.Abort()
		return 0, err
	}
	return w.Commit(first, last)
}

// Files lists the archive's complete files, oldest first (names sort by hour, then
// by store key, which is ingest order).
func Files(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") && !strings.HasPrefix(d.Name(), ".") {
			out = append(out, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	sort.Strings(out)
	return out, err
}

// ReadFile calls fn with each row of one file, in order. A damaged file is
// an error: parquet-go v0.32 panics on some (a footer whose offsets point
// outside the file, found by FuzzReadFile), so its panics are recovered
// here and returned.
func ReadFile(path string, fn func(*Row) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: damaged Parquet file: %v", path, p)
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	// The page index and bloom filters serve lookups; a full scan needs
	// neither, and each is more of the file to trust.
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	r := parquet.NewGenericReader[Row](pf)
	defer r.Close()
	buf := make([]Row, 256)
	for {
		n, err := r.Read(buf)
		for i := range n {
			if err := fn(&buf[i]); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// ExportLines writes every record under path (an archive directory or one
// file) as the fleet's export lines (JSON, one per line), oldest first:
// what `phaselessctl fleet telemetry export` prints and `model train
// --telemetry` reads.
func ExportLines(path string, w io.Writer) (int, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return 0, err
	} else if st.IsDir() {
		if files, err = Files(path); err != nil {
			return 0, err
		}
	}
	n := 0
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	for _, f := range files {
		err := ReadFile(f, func(r *Row) error {
			line.Reset()
			if err := enc.Encode(r.Exported()); err != nil {
				return err
			}
			n++
			_, err := w.Write(line.Bytes())
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Retain deletes the oldest files while the newest record of a file is
// older than maxAge (judged by its hour) or the archive is over maxBytes
// (0 = no bound for either), and returns how many files and bytes remain.
// A move's temporary file older than an hour is left from a crash and goes.
func Retain(dir string, now time.Time, maxAge time.Duration, maxBytes int64) (files int, size int64, err error) {
	parts, _ := filepath.Glob(filepath.Join(dir, "*", ".part-*"))
	for _, p := range parts {
		if st, err := os.Stat(p); err == nil && st.ModTime().Before(now.Add(-time.Hour)) {
			os.Remove(p)
		}
	}
	paths, err := Files(dir)
	if err != nil {
		return 0, 0, err
	}
	sizes := make([]int64, len(paths))
	for i, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return 0, 0, err
		}
		sizes[i] = st.Size()
		size += st.Size()
	}
	i := 0
	for ; i < len(paths); i++ {
		old := maxAge > 0 && hourOf(paths[i]).Add(time.Hour).Before(now.Add(-maxAge))
		over := maxBytes > 0 && size > maxBytes
		if !old && !over {
			break
		}
		if err := os.Remove(paths[i]); err != nil {
			return len(paths) - i, size, err
		}
		size -= sizes[i]
		// An emptied day directory goes too (Remove fails on a full one).
		_ = os.Remove(filepath.Dir(paths[i]))
	}
	return len(paths) - i, size, nil
}

// hourOf reads the hour a file's name gives (zero time if it does not
// parse, which sorts it as oldest: a stray file is the first to go).
func hourOf(path string) time.Time {
	day := filepath.Base(filepath.Dir(path))
	hh, _, _ := strings.Cut(filepath.Base(path), "-")
	t, err := time.Parse("2006-01-02 15", day+" "+hh)
	if err != nil {
		return time.Time{}
	}
	return t
}
