package fleetapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Client calls a cloud's fleet admin API over HTTP.
type Client struct {
	base   string
	apiKey string
	http   *http.Client
}

// NewClient returns a Client for the cloud at base (http or https URL).
// apiKey is sent with every request unless empty (a --dev cloud needs
// none); hc nil means http.DefaultClient.
func NewClient(base, apiKey string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fleet API: %q is not an http(s) URL", base)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(base, "/"), apiKey: apiKey, http: hc}, nil
}

// Devices lists every device in the registry.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	var devs []Device
	return devs, c.do(ctx, http.MethodGet, "devices", nil, &devs)
}

// Device returns one device with its recent commands.
func (c *Client) Device(ctx context.Context, id string) (*Device, error) {
	var d Device
	if err := c.do(ctx, http.MethodGet, "devices/"+url.PathEscape(id), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// SetConfig stores and publishes the next version of a device's desired
// config.
func (c *Client) SetConfig(ctx context.Context, id string, u ConfigUpdate) (*fleetwire.DesiredConfig, error) {
	var dc fleetwire.DesiredConfig
	if err := c.do(ctx, http.MethodPut, "devices/"+url.PathEscape(id)+"/config", u, &dc); err != nil {
		return nil, err
	}
	return &dc, nil
}

// SendCommand issues a command to a device; the answer is its pending state.
func (c *Client) SendCommand(ctx context.Context, id string, req CommandRequest) (*CommandState, error) {
	var cs CommandState
	if err := c.do(ctx, http.MethodPost, "devices/"+url.PathEscape(id)+"/commands", req, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// Command returns what became of a command.
func (c *Client) Command(ctx context.Context, id, cmdID string) (*CommandState, error) {
	var cs CommandState
	if err := c.do(ctx, http.MethodGet, "devices/"+url.PathEscape(id)+"/commands/"+url.PathEscape(cmdID), nil, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// Counts returns the fleet-wide telemetry totals.
func (c *Client) Counts(ctx context.Context) (*Counts, error) {
	var n Counts
	if err := c.do(ctx, http.MethodGet, "telemetry/count", nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// DeviceTelemetry returns one device's telemetry counts.
func (c *Client) DeviceTelemetry(ctx context.Context, id string) (*DeviceTelemetry, error) {
	var t DeviceTelemetry
	if err := c.do(ctx, http.MethodGet, "telemetry/count?device="+url.QueryEscape(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Export streams stored telemetry as JSON lines of ExportedRecord: one
// device's when device is set, those ingested at or after since when it is
// not zero. The caller closes the body.
func (c *Client) Export(ctx context.Context, device string, since time.Time) (io.ReadCloser, error) {
	q := url.Values{}
	if device != "" {
		q.Set("device", device)
	}
	if !since.IsZero() {
		q.Set("since", since.Format(time.RFC3339Nano))
	}
	path := "telemetry/export"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// do sends a request and decodes the JSON answer into out.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s%s: decode answer: %w", method, Prefix, path, err)
	}
	return nil
}

// send returns a 2xx response; any other answer is an error carrying the
// server's message.
func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	// A reader goes as it is (an artifact upload); anything else as JSON.
	rd, raw := body.(io.Reader)
	if body != nil && !raw {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+Prefix+path, rd)
	if err != nil {
		return nil, err
	}
	switch {
	case raw:
		req.Header.Set("Content-Type", "application/octet-stream")
	case body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		// The cloud accepts OpenAI- and Anthropic-style keys alike.
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
		req.Header.Set("x-api-key", c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the cloud at %s: %w", c.base, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg := strings.TrimSpace(string(raw))
		var e ErrorBody
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return nil, fmt.Errorf("%s %s%s: %s: %s", method, Prefix, path, resp.Status, msg)
	}
	return resp, nil
}
