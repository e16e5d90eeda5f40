package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The stdio transport serves tools/call on a path of its own, the
// server's hot path (a warm exec is almost all of an agent's calls).
// mcp-go's HandleMessage reads a call's message four times over before a
// handler runs (its envelope, the protocol information, _meta for a
// trace, the request), and a client of the stateless revision (2026-07-28,
// which the official Go SDK's client speaks) sends its identity and
// capabilities in the _meta of every request: on a warm exec from that
// client, mcp-go's reading was 40µs of the server's CPU, the direct path's
// is 15µs (BenchmarkStdioCall, in a profile).
//
// callDirect reads the parameters once and runs the same tool handler
// through the same middleware (Server.chain), and answers with the same
// messages mcp-go would (TestDirectCallsAnswerAsMCPGo holds it to that,
// byte for byte). It takes only the calls it is sure to answer alike: a
// tool the server has and runs synchronously, parameters with nothing but
// name, arguments (an object) and _meta of the keys it knows, an id that
// reads back as sent, a protocol revision mcp-go accepts; anything else
// goes to HandleMessage. The server registers no mcp-go hook that acts on
// tools/call (a tool call's telemetry and audit are middleware), so none
// is skipped.

// directCaller answers a tools/call with id and params, or reports false
// to leave the message to mcp-go.
type directCaller func(ctx context.Context, id, params json.RawMessage) (mcp.JSONRPCMessage, bool)

// directParams are the parameters of a call callDirect takes: any other
// member (a task, input responses) sends the call to mcp-go.
type directParams struct {
	Name      string          `json:"name"`
	Arguments map[string]any  `json:"arguments"`
	Meta      json.RawMessage `json:"_meta"`
}

// directMeta are the _meta keys of a call callDirect takes, besides the
// progress token: the stateless revision's, and a W3C trace context (which
// the telemetry middleware reads; mcp-go reads none without a propagator,
// and the server sets none).
var directMeta = map[string]bool{
	mcp.MetaKeyProtocolVersion: true, mcp.MetaKeyClientInfo: true, mcp.MetaKeyClientCapabilities: true, mcp.MetaKeyLogLevel: true,
	"traceparent": true, "tracestate": true,
}

// maxInputRounds bounds how often a call may ask the client for input
// (as mcp-go does for clients before input_required results).
const maxInputRounds = 10

// callDirect is the Server's directCaller.
func (s *Server) callDirect(ctx context.Context, id, params json.RawMessage) (mcp.JSONRPCMessage, bool) {
	rid, ok := directID(id)
	if !ok || len(params) == 0 {
		return nil, false
	}
	var p directParams
	d := json.NewDecoder(bytes.NewReader(params))
	d.DisallowUnknownFields()
	if d.Decode(&p) != nil {
		return nil, false
	}
	t := s.ms.GetTool(p.Name)
	if t == nil || t.Handler == nil || t.Tool.Execution != nil {
		return nil, false
	}
	var req mcp.CallToolRequest
	req.Method = string(mcp.MethodToolsCall)
	req.Params.Name = p.Name
	if p.Arguments != nil {
		req.Params.Arguments = p.Arguments
	}
	info := &server.RequestProtocolInfo{}
	if present(p.Meta) {
		var meta *mcp.Meta
		if meta, info, ok = s.readMeta(p.Meta); !ok {
			return nil, false
		}
		req.Params.Meta = meta
	}
	if info.Modern {
		adoptClient(ctx, info)
	}
	ctx = server.WithRequestProtocolInfo(ctx, info)
	h := t.Handler
	for i := len(s.chain) - 1; i >= 0; i-- {
		h = s.chain[i](h)
	}
	res, err := s.runWithInput(ctx, h, req)
	switch {
	case err != nil:
		return errorAnswer(id, mcp.INTERNAL_ERROR, err.Error()), true
	case res == nil:
		return errorAnswer(id, mcp.INTERNAL_ERROR, fmt.Sprintf("tool '%s' handler returned no result", p.Name)), true
	}
	if info.Modern {
		// What the stateless revision asks of every result.
		if res.GetResultType() == "" {
			res.SetResultType(mcp.ResultTypeComplete)
		}
		if meta := res.EnsureResultMeta(); meta.ServerInfo() == nil {
			meta.SetServerInfo(s.self)
		}
	}
	return mcp.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: rid, Result: res}, true
}

// lastMeta is the last _meta readMeta read, as sent and as read: a
// client of the stateless revision sends the same with every request.
type lastMeta struct {
	raw  []byte
	meta *mcp.Meta
	info *server.RequestProtocolInfo
}

// readMeta reads a call's _meta, as mcp-go does, and what it says of the
// protocol; false for what callDirect leaves to mcp-go. Each call gets a
// Meta of its own; the protocol information, which nothing changes, is
// shared by the calls that sent the same _meta.
func (s *Server) readMeta(raw json.RawMessage) (*mcp.Meta, *server.RequestProtocolInfo, bool) {
	if last := s.lastMeta.Load(); last != nil && bytes.Equal(last.raw, raw) {
		return &mcp.Meta{ProgressToken: last.meta.ProgressToken, AdditionalFields: maps.Clone(last.meta.AdditionalFields)}, last.info, true
	}
	meta := new(mcp.Meta)
	if json.Unmarshal(raw, meta) != nil {
		return nil, nil, false
	}
	for k := range meta.AdditionalFields {
		if !directMeta[k] {
			return nil, nil, false
		}
	}
	info, ok := protocolInfo(meta)
	if !ok {
		return nil, nil, false
	}
	kept := &mcp.Meta{ProgressToken: meta.ProgressToken, AdditionalFields: maps.Clone(meta.AdditionalFields)}
	s.lastMeta.Store(&lastMeta{raw: bytes.Clone(raw), meta: kept, info: info})
	return meta, info, true
}

// protocolInfo is what a call's _meta says of its protocol, as mcp-go
// reads it; false for what mcp-go refuses (a stateless revision it does
// not know, or without the client's capabilities).
func protocolInfo(meta *mcp.Meta) (*server.RequestProtocolInfo, bool) {
	version := meta.ProtocolVersion()
	if !mcp.IsModernProtocol(version) {
		return &server.RequestProtocolInfo{ProtocolVersion: version}, true
	}
	caps := meta.ClientCapabilities()
	if !mcp.IsValidProtocolVersion(version) || caps == nil {
		return nil, false
	}
	return &server.RequestProtocolInfo{Modern: true, ProtocolVersion: version, ClientInfo: meta.ClientInfo(),
		ClientCapabilities: caps, LogLevel: meta.LogLevel()}, true
}

// adoptClient records what a stateless request says of its client on the
// session, as mcp-go does: the session then answers as if the client had
// said it in an initialize handshake.
func adoptClient(ctx context.Context, info *server.RequestProtocolInfo) {
	sess := server.ClientSessionFromContext(ctx)
	if sess == nil {
		return
	}
	if withInfo, ok := sess.(server.SessionWithClientInfo); ok {
		if info.ClientInfo != nil {
			withInfo.SetClientInfo(*info.ClientInfo)
		}
		if info.ClientCapabilities != nil {
			withInfo.SetClientCapabilities(*info.ClientCapabilities)
		}
	}
	if !sess.Initialized() {
		sess.Initialize()
	}
}

// runWithInput runs h, and when its result asks the client for roots (the
// transfer tools do, see askRoots) of a client that predates
// input_required results, asks for them and runs h again with the answer.
func (s *Server) runWithInput(ctx context.Context, h server.ToolHandlerFunc, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	res, err := h(ctx, req)
	if mcp.IsModernProtocol(server.RequestProtocolVersion(ctx)) {
		return res, err
	}
	for round := 0; err == nil && res != nil && res.NeedsInput(); round++ {
		if len(res.InputRequests) == 0 {
			return nil, errors.New("multi round-trip: the tool asked for input without saying which")
		}
		if round >= maxInputRounds {
			return nil, fmt.Errorf("multi round-trip: handler asked for input more than %d times", maxInputRounds)
		}
		answers := make(mcp.InputResponses, len(res.InputRequests))
		for key, in := range res.InputRequests {
			if in.Method != mcp.MethodListRoots {
				return nil, fmt.Errorf("multi round-trip: input request %q: unsupported method %q", key, in.Method)
			}
			roots, err := s.ms.RequestRoots(ctx, mcp.ListRootsRequest{Request: mcp.Request{Method: string(mcp.MethodListRoots)}})
			if err != nil {
				return nil, fmt.Errorf("multi round-trip: fulfilling input request %q: %w", key, err)
			}
			if roots == nil {
				return nil, fmt.Errorf("multi round-trip: fulfilling input request %q: no roots result", key)
			}
			answers[key] = mcp.NewRootsInputResponse(*roots)
		}
		again := req
		again.Params.MultiRoundTripParams = mcp.MultiRoundTripParams{InputResponses: answers, RequestState: res.RequestState}
		res, err = h(ctx, again)
	}
	return res, err
}

// directID is a request id callDirect answers with, as mcp-go would
// write it back: a string, or an integer of at most 15 digits (mcp-go
// reads a number as a float64, which holds those exactly and writes them
// as they were sent).
func directID(raw json.RawMessage) (mcp.RequestId, bool) {
	if len(raw) == 0 {
		return mcp.RequestId{}, false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return mcp.RequestId{}, false
		}
		return mcp.NewRequestId(s), true
	}
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) {
		return mcp.RequestId{}, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return mcp.RequestId{}, false
		}
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || (n == 0 && raw[0] == '-') {
		return mcp.RequestId{}, false // -0 reads back as 0 from an int
	}
	return mcp.NewRequestId(n), true
}
