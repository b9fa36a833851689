package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"

	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/internal/regfile"
)

// maxConfigBytes bounds a --config file.
const maxConfigBytes = 1 << 20

// configFile is the --config flag: a YAML mapping from flag names of the
// selected subcommand (or global flags) to values. Scalars are given as on
// the command line; lists (fanouts) may be YAML sequences or "10,5".
type configFile string

// BeforeResolve loads the file and installs a resolver for the flags that
// were not given on the command line.
func (c configFile) BeforeResolve(ctx *kong.Context, trace *kong.Path) error {
	path := string(ctx.FlagValue(trace.Flag).(configFile))
	if path == "" {
		return nil
	}
	flags := map[string]*kong.Flag{}
	var cmd []string
	for _, p := range ctx.Path {
		if p.Command != nil {
			cmd = append(cmd, p.Command.Name)
		}
		if p.App == nil && p.Command == nil {
			continue
		}
		for _, f := range p.Flags {
			switch f.Name {
			case "help", "config", "version":
				continue
			}
			flags[f.Name] = f
		}
	}
	values, err := loadConfig(path, flags, "strata "+strings.Join(cmd, " "))
	if err != nil {
		return usageError{err}
	}
	ctx.AddResolver(kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
		if v, ok := values[f.Name]; ok {
			return v, nil
		}
		return nil, nil
	}))
	return nil
}

// loadConfig reads a YAML config file and returns flag name -> value (a
// string as it would appear on the command line). Unknown and duplicate
// keys and non-scalar values are errors naming the key and its line.
func loadConfig(path string, flags map[string]*kong.Flag, command string) (map[string]string, error) {
	// regfile: a FIFO named as the config must not block forever.
	data, err := regfile.ReadFile(path, maxConfigBytes)
	var tl *regfile.TooLargeError
	if errors.As(err, &tl) {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxConfigBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF { // empty file: no values
			return map[string]string{}, nil
		}
		// The parser's messages carry the line; they may quote input.
		return nil, fmt.Errorf("config %s: %s", path, excerpt.Message(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, fmt.Errorf("config %s: more than one YAML document", path)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return map[string]string{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s: line %d: want a mapping of flag names to values", path, root.Line)
	}
	out := map[string]string{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := strings.ReplaceAll(k.Value, "_", "-")
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("config %s: line %d: keys must be flag names", path, k.Line)
		}
		key := excerpt.String(k.Value)
		fl, ok := flags[name]
		if !ok {
			return nil, fmt.Errorf("config %s: line %d: unknown key %s: %s has no flag --%s (%s)",
				path, k.Line, key, command, excerpt.Message(name), knownFlags(flags, name, command))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("config %s: line %d: key %s given twice", path, k.Line, key)
		}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, fmt.Errorf("config %s: line %d: key %s has no value", path, v.Line, key)
			}
			out[name] = v.Value
		case yaml.SequenceNode:
			parts := make([]string, len(v.Content))
			for j, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("config %s: line %d: key %s: list items must be plain values", path, item.Line, key)
				}
				parts[j] = item.Value
			}
			out[name] = strings.Join(parts, ",")
		default:
			return nil, fmt.Errorf("config %s: line %d: key %s: want a value or a list", path, v.Line, key)
		}
		// Parse the value as the command line would now, so a bad one is
		// reported with this file and line (kong would name only the flag,
		// and echo the value whole).
		if err := checkFlagValue(fl, out[name]); err != nil {
			return nil, fmt.Errorf("config %s: line %d: key %s: %s", path, v.Line, key, err)
		}
	}
	return out, nil
}

// checkFlagValue parses value (as a config file gives it) with f's mapper
// into a scratch variable, and checks it against f's allowed values. The
// error quotes the value only as a short escaped excerpt.
func checkFlagValue(f *kong.Flag, value string) error {
	target := reflect.New(f.Target.Type()).Elem()
	ctx := &kong.DecodeContext{Value: f.Value, Scan: kong.Scan().PushTyped(value, kong.FlagValueToken)}
	if err := f.Mapper.Decode(ctx, target); err != nil {
		// Mappers quote the value, or one item of a list, whole.
		msg := err.Error()
		for _, v := range append([]string{value}, strings.Split(value, ",")...) {
			if q := strconv.Quote(v); len(v) > excerpt.Max || q[1:len(q)-1] != v {
				msg = strings.ReplaceAll(msg, q, excerpt.String(v))
			}
		}
		return errors.New(excerpt.Message(msg))
	}
	if f.Enum == "" {
		return nil
	}
	allowed := f.EnumSlice()
	var check func(v reflect.Value) error
	check = func(v reflect.Value) error {
		if v.Kind() == reflect.Slice {
			for i := 0; i < v.Len(); i++ {
				if err := check(v.Index(i)); err != nil {
					return err
				}
			}
			return nil
		}
		if got := fmt.Sprint(v.Interface()); !slices.Contains(allowed, got) {
			return fmt.Errorf("want one of %s, got %s", strings.Join(allowed, ", "), excerpt.String(got))
		}
		return nil
	}
	return check(target)
}

// knownFlags names the flags close to name (within an edit distance of
// a third of its length, at least 2), or says where they are listed when
// none is: the whole list of train's flags is too long for one line.
func knownFlags(flags map[string]*kong.Flag, name, command string) string {
	var near []string
	if len(name) <= 64 {
		for n := range flags {
			if editDistance(n, name) <= max(2, len(name)/3) {
				near = append(near, "--"+n)
			}
		}
	}
	if len(near) == 0 {
		return "'" + command + " --help' lists them"
	}
	sort.Strings(near)
	return "did you mean " + strings.Join(near, ", ") + "?"
}

// editDistance is the Levenshtein distance between a and b (in bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
