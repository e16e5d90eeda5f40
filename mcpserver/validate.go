package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// argChecker validates every tool call's arguments against the tool's
// input schema before its handler runs: unknown arguments, wrong types,
// out-of-range numbers, values outside an enum, bad sandbox names. The
// validator is the one mcp-go's WithInputSchemaValidation uses; it runs
// here, as middleware, so that a refusal names the argument, what it got
// and what is accepted (mcp-go's own text reads "/timeout: &{Got:string
// Want:number}").
type argChecker struct {
	tools map[string]checkedSchema
}

type checkedSchema struct {
	def    mcp.Tool
	schema *jsonschema.Schema
	// doc is the schema as generic JSON, where a refusal looks up what an
	// argument accepts.
	doc map[string]any
}

// newArgChecker compiles the input schema of every tool; a schema that
// does not compile is a programming error.
func newArgChecker(defs []mcp.Tool) (*argChecker, error) {
	c := &argChecker{tools: map[string]checkedSchema{}}
	for _, def := range defs {
		raw, err := json.Marshal(def.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", def.Name, err)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", def.Name, err)
		}
		url := "mem:///tools/" + def.Name + ".json"
		comp := jsonschema.NewCompiler()
		if err := comp.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", def.Name, err)
		}
		sch, err := comp.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", def.Name, err)
		}
		m, _ := doc.(map[string]any)
		c.tools[def.Name] = checkedSchema{def: def, schema: sch, doc: m}
	}
	return c, nil
}

// middleware refuses a call whose arguments do not match the schema, with
// an isError result the model can act on.
func (c *argChecker) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if msg := c.check(req.Params.Name, req.Params.Arguments); msg != "" {
			return mcp.NewToolResultError(msg), nil
		}
		return next(ctx, req)
	}
}

// check returns "" when args suit the tool's schema, else the refusal.
func (c *argChecker) check(name string, args any) string {
	t, ok := c.tools[name]
	if !ok {
		return ""
	}
	inst, err := instance(args)
	if err != nil {
		return fmt.Sprintf("%s: the arguments must be a JSON object: %v", name, err)
	}
	inst = withoutNulls(inst, t.def.InputSchema.Required)
	err = t.schema.Validate(inst)
	if err == nil {
		return ""
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Sprintf("%s: invalid arguments: %v", name, err)
	}
	var lines []string
	for _, leaf := range leaves(verr) {
		for _, l := range explain(name, t.doc, inst, leaf) {
			if !slices.Contains(lines, l) {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) == 0 {
		lines = []string{verr.Error()}
	}
	return name + ": invalid arguments: " + strings.Join(lines, "; ")
}

// instance turns the call's arguments into the generic JSON value the
// validator takes: nil is an empty object.
func instance(args any) (any, error) {
	switch a := args.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return a, nil
	case json.RawMessage:
		if len(strings.TrimSpace(string(a))) == 0 {
			return map[string]any{}, nil
		}
		return jsonschema.UnmarshalJSON(strings.NewReader(string(a)))
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
}

// withoutNulls drops optional arguments given as null: clients send null
// for "not given", and the handlers read it so.
func withoutNulls(inst any, required []string) any {
	m, ok := inst.(map[string]any)
	if !ok {
		return inst
	}
	var out map[string]any
	for k, v := range m {
		if v != nil || slices.Contains(required, k) {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(m))
			for k2, v2 := range m {
				out[k2] = v2
			}
		}
		delete(out, k)
	}
	if out == nil {
		return m
	}
	return out
}

func leaves(v *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(v.Causes) == 0 {
		return []*jsonschema.ValidationError{v}
	}
	var out []*jsonschema.ValidationError
	for _, c := range v.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// explain turns one violation into sentences naming the argument.
func explain(tool string, root map[string]any, inst any, v *jsonschema.ValidationError) []string {
	loc := v.InstanceLocation
	here := schemaAt(root, loc)
	switch k := v.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		unknown := make([]string, len(k.Properties))
		for i, p := range k.Properties {
			unknown[i] = strconv.Quote(argPath(append(slices.Clone(loc), p)))
		}
		sort.Strings(unknown)
		what := "unknown argument " + strings.Join(unknown, ", ")
		if len(unknown) > 1 {
			what = "unknown arguments " + strings.Join(unknown, ", ")
		}
		if len(loc) == 0 {
			props, _ := here["properties"].(map[string]any)
			if names := slices.Sorted(maps.Keys(props)); len(names) > 0 {
				what += "; " + tool + " takes " + strings.Join(names, ", ")
			} else {
				what += "; " + tool + " takes no arguments"
			}
		}
		return []string{what}
	case *kind.Required:
		var out []string
		for _, p := range k.Missing {
			at := append(slices.Clone(loc), p)
			out = append(out, fmt.Sprintf("%q is required: %s", argPath(at), accepted(schemaAt(root, at))))
		}
		return out
	}
	if len(loc) == 0 {
		return []string{"the arguments must be a JSON object"}
	}
	return []string{fmt.Sprintf("%q must be %s; got %s", argPath(loc), accepted(here), describeValue(valueAt(inst, loc)))}
}

// accepted says in words what a property schema accepts.
func accepted(s map[string]any) string {
	if s == nil {
		return "a value this tool accepts"
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		vals := make([]string, len(enum))
		for i, e := range enum {
			b, _ := json.Marshal(e)
			vals[i] = string(b)
		}
		return "one of " + strings.Join(vals, ", ")
	}
	typ, _ := s["type"].(string)
	var b strings.Builder
	switch typ {
	case "string":
		if s["pattern"] == sandboxPattern {
			return "a name (names are 1-63 letters, digits, '_', '.', '-', starting with a letter or digit)"
		}
		b.WriteString("a string")
		if p, ok := s["pattern"].(string); ok {
			fmt.Fprintf(&b, " matching %s", p)
		}
		if n, ok := number(s["maxLength"]); ok {
			fmt.Fprintf(&b, " of at most %s characters", plain(n))
		}
	case "integer", "number":
		if typ == "integer" {
			b.WriteString("a whole number")
		} else {
			b.WriteString("a number")
		}
		lo, hasLo := number(s["minimum"])
		hi, hasHi := number(s["maximum"])
		switch {
		case hasLo && hasHi:
			fmt.Fprintf(&b, " from %s to %s", plain(lo), plain(hi))
		case hasLo:
			fmt.Fprintf(&b, " of at least %s", plain(lo))
		case hasHi:
			fmt.Fprintf(&b, " of at most %s", plain(hi))
		}
	case "boolean":
		b.WriteString("true or false")
	case "array":
		b.WriteString("a list")
		if items, ok := s["items"].(map[string]any); ok {
			if it, _ := items["type"].(string); it != "" {
				fmt.Fprintf(&b, " of %ss", it)
			}
		}
		if n, ok := number(s["minItems"]); ok && n > 0 {
			fmt.Fprintf(&b, " with at least %s item(s)", plain(n))
		}
	case "object":
		b.WriteString("an object")
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			if t, _ := ap["type"].(string); t != "" {
				fmt.Fprintf(&b, " whose values are %ss", t)
			}
		}
	default:
		b.WriteString("a value this tool accepts")
	}
	return b.String()
}

// describeValue names a JSON value for an error: its kind, and the value itself
// when short.
func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) <= 40 {
			return "the string " + strconv.Quote(x)
		}
		return fmt.Sprintf("a string of %d bytes", len(x))
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return "the number " + x.String()
	case float64:
		return "the number " + strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		return fmt.Sprintf("a list of %d item(s)", len(x))
	case map[string]any:
		return "an object"
	}
	return jsonKindOf(v)
}

// schemaAt walks properties and items down to the schema of loc.
func schemaAt(s map[string]any, loc []string) map[string]any {
	for _, seg := range loc {
		if s == nil {
			return nil
		}
		if props, ok := s["properties"].(map[string]any); ok {
			if p, ok := props[seg].(map[string]any); ok {
				s = p
				continue
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			s = items
			continue
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			s = ap
			continue
		}
		return nil
	}
	return s
}

func valueAt(v any, loc []string) any {
	for _, seg := range loc {
		switch x := v.(type) {
		case map[string]any:
			v = x[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// argPath writes a location as the model wrote it: files["a.txt"], list[0].
func argPath(loc []string) string {
	var b strings.Builder
	for i, seg := range loc {
		switch {
		case i == 0:
			b.WriteString(seg)
		case isIndex(seg):
			b.WriteString("[" + seg + "]")
		default:
			b.WriteString("[" + strconv.Quote(seg) + "]")
		}
	}
	return b.String()
}

func isIndex(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// plain writes a number without an exponent: 9007199254740992, not 9.007e+15.
func plain(n float64) string { return strconv.FormatFloat(n, 'f', -1, 64) }

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int:
		return float64(n), true
	}
	return 0, false
}
