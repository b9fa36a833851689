package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"
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
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxConfigBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF { // empty file: no values
			return map[string]string{}, nil
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
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
		if _, ok := flags[name]; !ok {
			return nil, fmt.Errorf("config %s: line %d: unknown key %q: %s has no flag --%s (known: %s)",
				path, k.Line, k.Value, command, name, knownFlags(flags))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("config %s: line %d: key %q given twice", path, k.Line, k.Value)
		}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, fmt.Errorf("config %s: line %d: key %q has no value", path, v.Line, k.Value)
			}
			out[name] = v.Value
		case yaml.SequenceNode:
			parts := make([]string, len(v.Content))
			for j, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("config %s: line %d: key %q: list items must be plain values", path, item.Line, k.Value)
				}
				parts[j] = item.Value
			}
			out[name] = strings.Join(parts, ",")
		default:
			return nil, fmt.Errorf("config %s: line %d: key %q: want a value or a list", path, v.Line, k.Value)
		}
	}
	return out, nil
}

func knownFlags(flags map[string]*kong.Flag) string {
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
