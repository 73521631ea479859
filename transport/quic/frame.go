package quic

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// Frame layout on a stream:
//
//	version  1 byte   (ProtocolVersion)
//	type     1 byte   (FrameType)
//	length   4 bytes  big-endian payload length, at most MaxFrameSize
//	payload  length bytes
//
// Payload fields are uvarints, zig-zag varints, IEEE-754 float64 bits
// (8 bytes big-endian) and strings (uvarint length + bytes), in the fixed
// order written by the append* functions below. Fields added since the first
// revision come after the fixed ones: revision 2's meta and error fields, then
// the tagged extension sections of ext.go, which a decoder skips when it does
// not know them, so features add fields without a version bump. Anything that
// changes the meaning of existing fields bumps ProtocolVersion.
const (
	ProtocolVersion = 1
	HeaderLen       = 6
	// MaxFrameSize bounds a payload so that a peer cannot make us allocate
	// more than this per frame. A request with a long context is the largest
	// frame; 1 MiB is far above the 4096-token output limit and a long prompt.
	MaxFrameSize = 1 << 20
)

// FrameType says what a frame carries.
type FrameType byte

// Frame types. Request and cancel go client → server; the others go back.
const (
	FrameRequest FrameType = 1
	FrameMeta    FrameType = 2
	FrameToken   FrameType = 3
	FrameFinal   FrameType = 4
	FrameError   FrameType = 5
	FrameCancel  FrameType = 6
	// FrameHeartbeat (server → client, no payload) says the server is alive
	// while a request produces nothing else; it is sent only to clients
	// that ask for it in their request frame (see heartbeat.go).
	FrameHeartbeat FrameType = 7
	// FrameResume (client → server, the first frame of a stream instead
	// of a request) follows a keyed request again after a lost link, from
	// the token it names (see resume.go).
	FrameResume FrameType = 8
)

func (t FrameType) String() string {
	switch t {
	case FrameRequest:
		return "request"
	case FrameMeta:
		return "meta"
	case FrameToken:
		return "token"
	case FrameFinal:
		return "final"
	case FrameError:
		return "error"
	case FrameCancel:
		return "cancel"
	case FrameHeartbeat:
		return "heartbeat"
	case FrameResume:
		return "resume"
	}
	return fmt.Sprintf("unknown(%d)", byte(t))
}

// Frame is one decoded frame; the field named by Type is set.
type Frame struct {
	Type    FrameType
	Request *llm.Request // FrameRequest
	Meta    llm.Meta     // FrameMeta
	Token   llm.Token    // FrameToken
	Final   llm.Final    // FrameFinal
	Err     *llm.Error   // FrameError
	// Heartbeat (FrameRequest) asks the server for a heartbeat frame at
	// this interval while it writes nothing else; 0 asks for none. It is
	// the last field of the request, so a server that predates it ignores
	// it and a client that predates it sends none. A resume frame carries
	// it too.
	Heartbeat time.Duration
	// Resume (FrameResume) names the request to follow again and from where.
	Resume Resume
}

// ProtocolError is a frame that breaks the protocol: an unknown version or
// type, a length over MaxFrameSize, or a payload that does not decode. The
// stream carrying it is reset; the connection survives.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "phaseless/1 protocol error: " + e.Reason }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

// AppendFrame appends f's wire form to b.
func AppendFrame(b []byte, f *Frame) ([]byte, error) {
	start := len(b)
	b = append(b, ProtocolVersion, byte(f.Type), 0, 0, 0, 0)
	switch f.Type {
	case FrameRequest:
		if f.Request == nil {
			return b[:start], errors.New("request frame without a request")
		}
		b = appendRequest(b, f.Request)
		// The heartbeat interval is optional, and the extensions follow
		// it: write it when either is there.
		mark := len(b)
		b = appendDuration(b, f.Heartbeat)
		exts := len(b)
		b = appendExts(b, requestExts, f.Request)
		if f.Heartbeat <= 0 && len(b) == exts {
			b = b[:mark]
		}
	case FrameMeta:
		b = appendMeta(b, &f.Meta)
	case FrameToken:
		b = appendString(b, f.Token.Text)
		b = binary.AppendVarint(b, int64(f.Token.ID))
		b = appendDuration(b, f.Token.EngineLatency)
		b = appendExts(b, tokenExts, &f.Token)
	case FrameFinal:
		b = appendFinal(b, &f.Final)
		b = appendExts(b, finalExts, &f.Final)
	case FrameError:
		if f.Err == nil {
			return b[:start], errors.New("error frame without an error")
		}
		b = appendString(b, string(f.Err.Code))
		b = appendString(b, f.Err.Message)
		b = appendBool(b, f.Err.Retryable)
		b = appendDuration(b, f.Err.RetryAfter)
		b = appendBool(b, f.Err.HasBudget) // appended in revision 2 of the layout
		b = binary.AppendVarint(b, f.Err.BudgetRemaining)
	case FrameResume:
		b = appendString(b, f.Resume.Key)
		b = binary.AppendUvarint(b, uint64(f.Resume.Offset))
		b = appendDuration(b, f.Heartbeat)
		b = appendBool(b, f.Resume.Cancel)
	case FrameCancel, FrameHeartbeat:
	default:
		return b[:start], fmt.Errorf("cannot encode frame type %v", f.Type)
	}
	n := len(b) - start - HeaderLen
	if n > MaxFrameSize {
		return b[:start], fmt.Errorf("%v frame of %d bytes is over the %d byte limit", f.Type, n, MaxFrameSize)
	}
	binary.BigEndian.PutUint32(b[start+2:], uint32(n))
	return b, nil
}

// parseHeader checks a frame header and returns its type and payload length.
func parseHeader(h []byte) (FrameType, int, error) {
	if h[0] != ProtocolVersion {
		return 0, 0, protoErr("unsupported version %d (this build speaks %d)", h[0], ProtocolVersion)
	}
	t := FrameType(h[1])
	if t < FrameRequest || t > FrameResume {
		return 0, 0, protoErr("unknown frame type %d", h[1])
	}
	n := binary.BigEndian.Uint32(h[2:])
	if n > MaxFrameSize {
		return 0, 0, protoErr("%v frame of %d bytes is over the %d byte limit", t, n, MaxFrameSize)
	}
	return t, int(n), nil
}

// DecodeFrame decodes the one frame at the start of b and returns it with
// the number of bytes it used. A b that holds only part of a frame is
// io.ErrUnexpectedEOF; anything malformed is a *ProtocolError.
func DecodeFrame(b []byte) (Frame, int, error) {
	if len(b) < HeaderLen {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	t, n, err := parseHeader(b[:HeaderLen])
	if err != nil {
		return Frame{}, 0, err
	}
	if len(b)-HeaderLen < n {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	f, err := decodePayload(t, b[HeaderLen:HeaderLen+n])
	return f, HeaderLen + n, err
}

// frameReader reads frames from a stream, reusing one payload buffer.
type frameReader struct {
	r   *bufio.Reader
	hdr [HeaderLen]byte
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 4096)}
}

// next reads one frame. A clean end of stream before a header is io.EOF; a
// stream that ends inside a frame is a *ProtocolError.
func (fr *frameReader) next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, protoErr("stream ended inside a frame header")
		}
		return Frame{}, err
	}
	t, n, err := parseHeader(fr.hdr[:])
	if err != nil {
		return Frame{}, err
	}
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, protoErr("stream ended inside a %v frame", t)
		}
		return Frame{}, err
	}
	return decodePayload(t, p)
}

func decodePayload(t FrameType, p []byte) (Frame, error) {
	d := decoder{b: p}
	f := Frame{Type: t}
	switch t {
	case FrameRequest:
		f.Request = d.request()
		if d.err == nil && len(d.b) > 0 {
			f.Heartbeat = d.duration()
			if f.Heartbeat < 0 {
				d.fail("negative heartbeat interval %v", f.Heartbeat)
			}
		}
		decodeExts(&d, requestExts, f.Request)
		checkBreakpoints(&d, f.Request)
	case FrameMeta:
		f.Meta = d.meta()
	case FrameToken:
		f.Token.Text = d.string()
		id := d.varint()
		if id < math.MinInt32 || id > math.MaxInt32 {
			d.fail("token id %d out of range", id)
		}
		f.Token.ID = int32(id)
		f.Token.EngineLatency = d.duration()
		decodeExts(&d, tokenExts, &f.Token)
	case FrameFinal:
		f.Final = d.final()
		decodeExts(&d, finalExts, &f.Final)
	case FrameError:
		f.Err = &llm.Error{Code: llm.Code(d.string()), Message: d.string(), Retryable: d.bool(), RetryAfter: d.duration()}
		if d.more() {
			f.Err.HasBudget, f.Err.BudgetRemaining = d.bool(), d.varint()
		}
		if d.err == nil && f.Err.Code == "" {
			d.fail("error frame without a code")
		}
	case FrameResume:
		f.Resume.Key = d.string()
		off := d.uvarint()
		if off > math.MaxInt32 {
			d.fail("resume offset %d out of range", off)
		}
		f.Resume.Offset = int(off)
		f.Heartbeat = d.duration()
		f.Resume.Cancel = d.bool()
		if d.err == nil && (f.Resume.Key == "" || f.Heartbeat < 0) {
			d.fail("resume frame without a key or with a negative heartbeat")
		}
	case FrameCancel, FrameHeartbeat:
	}
	if d.err != nil {
		return Frame{}, d.err
	}
	return f, nil
}

func appendRequest(b []byte, r *llm.Request) []byte {
	b = appendString(b, r.ID)
	b = appendString(b, r.Model)
	b = binary.AppendUvarint(b, uint64(len(r.Messages)))
	for _, m := range r.Messages {
		b = appendString(b, m.Role)
		b = appendString(b, m.Content)
	}
	b = binary.AppendVarint(b, int64(r.MaxTokens))
	b = appendFloat(b, r.Temperature)
	b = appendFloat(b, r.TopP)
	b = binary.AppendVarint(b, int64(r.TopK))
	b = binary.AppendUvarint(b, r.Seed)
	b = binary.AppendUvarint(b, uint64(len(r.Stop)))
	for _, s := range r.Stop {
		b = appendString(b, s)
	}
	b = appendString(b, r.IdempotencyKey)
	h := &r.Hints
	b = appendString(b, h.Route)
	b = appendString(b, h.Prefetch)
	b = appendFloat(b, h.BatchThreshold)
	b = appendDuration(b, h.CacheTTL)
	b = appendString(b, h.SemanticMode)
	b = appendString(b, h.Policy)
	// Tenant is not sent: the receiver sets it from the peer's identity.
	return b
}

func (d *decoder) request() *llm.Request {
	r := &llm.Request{ID: d.string(), Model: d.string()}
	if n := d.count(2); n > 0 {
		r.Messages = make([]llm.Message, n)
		for i := range r.Messages {
			r.Messages[i] = llm.Message{Role: d.string(), Content: d.string()}
		}
	}
	r.MaxTokens = d.int()
	r.Temperature = d.float()
	r.TopP = d.float()
	r.TopK = d.int()
	r.Seed = d.uvarint()
	if n := d.count(1); n > 0 {
		r.Stop = make([]string, n)
		for i := range r.Stop {
			r.Stop[i] = d.string()
		}
	}
	r.IdempotencyKey = d.string()
	r.Hints = llm.Hints{Route: d.string(), Prefetch: d.string(), BatchThreshold: d.float(), CacheTTL: d.duration(), SemanticMode: d.string(), Policy: d.string()}
	return r
}

// Meta payload: the first five fields are revision 1's (route as the
// x-phaseless-route header writes it, hint, fallback text, budget), so an
// older agent still shows them; revision 2 appends the typed fields a newer
// peer reads instead: route, pool, worker, fallback cause, origin and code.
func appendMeta(b []byte, m *llm.Meta) []byte {
	b = appendString(b, m.RouteHeader())
	b = appendString(b, m.SchedulerHint)
	b = appendString(b, m.Fallback.String())
	b = appendBool(b, m.HasBudget)
	b = binary.AppendVarint(b, m.BudgetRemaining)
	b = appendString(b, m.Route)
	b = appendString(b, m.Pool)
	b = appendString(b, m.Worker)
	b = append(b, byte(m.Fallback.Cause))
	b = appendString(b, m.Fallback.From)
	b = appendString(b, string(m.Fallback.Code))
	return appendExts(b, metaExts, m)
}

func (d *decoder) meta() llm.Meta {
	legacyRoute := d.string()
	m := llm.Meta{SchedulerHint: d.string(), Fallback: llm.Fallback{Detail: d.string()}, HasBudget: d.bool(), BudgetRemaining: d.varint()}
	if !d.more() { // a revision-1 peer: the route is all it said
		m.Route = legacyRoute
		return m
	}
	m.Route, m.Pool, m.Worker = d.string(), d.string(), d.string()
	if c := llm.FallbackCause(d.byte()); c.Valid() {
		m.Fallback.Cause = c
	} else {
		d.fail("fallback cause %d", c)
	}
	m.Fallback.From, m.Fallback.Code = d.string(), llm.Code(d.string())
	if m.Fallback.Detail == m.Fallback.Cause.String() {
		m.Fallback.Detail = "" // the text slot held only the cause's name
	}
	decodeExts(d, metaExts, &m)
	return m
}

func appendFinal(b []byte, f *llm.Final) []byte {
	b = binary.AppendVarint(b, int64(f.PromptTokens))
	b = binary.AppendVarint(b, int64(f.CompletionTokens))
	b = appendString(b, f.FinishReason)
	b = appendDuration(b, f.TTFT)
	b = appendDuration(b, f.Total)
	b = binary.AppendVarint(b, int64(f.PrefixHitTokens))
	// Revision 1 repeated the hint, route and fallback reason here; the
	// meta frame carries them now. Three empty strings keep the layout
	// that older decoders expect.
	return append(b, 0, 0, 0)
}

func (d *decoder) final() llm.Final {
	f := llm.Final{
		PromptTokens: d.int(), CompletionTokens: d.int(), FinishReason: d.string(),
		TTFT: d.duration(), Total: d.duration(), PrefixHitTokens: d.int(),
	}
	d.string() // revision 1's hint, route and fallback reason: now in the meta frame
	d.string()
	d.string()
	return f
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendDuration(b []byte, d time.Duration) []byte { return binary.AppendVarint(b, int64(d)) }

// decoder reads payload fields; the first failure sticks and later reads
// return zero values, so decode functions read straight through.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = protoErr(format, args...)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a varint that must fit an int32, the range of every count and
// limit the protocol carries, so values mean the same on 32-bit devices.
func (d *decoder) int() int {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("integer %d out of range", v)
		return 0
	}
	return int(v)
}

func (d *decoder) duration() time.Duration { return time.Duration(d.varint()) }

// count reads a list length and checks it against the bytes left, each
// element taking at least minSize bytes, so a forged count cannot make us
// allocate more than the frame holds.
func (d *decoder) count(minSize int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/minSize) {
		d.fail("list of %d elements in %d bytes", v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("string of %d bytes with %d left", n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) float() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated float")
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

// more reports whether fields follow: a field appended in a later revision
// of the layout is read only when the peer wrote it.
func (d *decoder) more() bool { return d.err == nil && len(d.b) > 0 }

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < 1 {
		d.fail("truncated bool")
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	if v > 1 {
		d.fail("bool byte %d", v)
	}
	return v == 1
}
