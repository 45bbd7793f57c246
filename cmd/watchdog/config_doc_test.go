package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ncclwatch/watchdog/alert"
)

const configDoc = "../../docs/configuration.md"

// docTables returns the table rows of docs/configuration.md whose first cell is a
// backticked name: by section (the `## ` heading above them), then by that name.
func docTables(t *testing.T) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if rows[section] == nil {
			rows[section] = map[string][]string{}
		}
		rows[section][strings.Trim(cells[0], "`")] = cells
	}
	return rows
}

// anySection merges every section's rows.
func anySection(rows map[string]map[string][]string) map[string][]string {
	out := map[string][]string{}
	for _, sec := range rows {
		for k, v := range sec {
			out[k] = v
		}
	}
	return out
}

func unquote(cell string) string { return strings.Trim(strings.TrimSpace(cell), "`\"") }

// yamlKeys walks a config struct's yaml tags: dotted paths, "[]" for list elements.
func yamlKeys(t reflect.Type, prefix string, out map[string]reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "-" || !f.IsExported() {
			continue
		}
		if inline(f) {
			yamlKeys(f.Type, prefix, out)
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		key := prefix + tag
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Duration(0)):
			yamlKeys(ft, key+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			yamlKeys(ft.Elem(), key+"[].", out)
		default:
			out[key] = ft
		}
	}
}

// inline reports a field whose keys YAML reads one level up (`yaml:",inline"`).
func inline(f reflect.StructField) bool {
	return slices.Contains(strings.Split(f.Tag.Get("yaml"), ",")[1:], "inline")
}

// TestConfigurationDocumentsDetectorConfig: every key of the detector's YAML (rules and
// alert routing included) has a row in docs/configuration.md, and the documented defaults
// of DetectorConfig are the real ones.
func TestConfigurationDocumentsDetectorConfig(t *testing.T) {
	rows := anySection(docTables(t))
	keys := map[string]reflect.Type{}
	yamlKeys(reflect.TypeOf(DetectorConfig{}), "", keys)
	if len(keys) < 30 {
		t.Fatalf("only %d keys found in DetectorConfig", len(keys))
	}
	for k := range keys {
		if _, ok := rows[k]; !ok {
			t.Errorf("docs/configuration.md has no row for the detector key `%s`", k)
		}
	}
	// Defaults: the second cell of each DetectorConfig row (outside alerts).
	def := reflect.ValueOf(defaultDetectorConfig())
	var check func(v reflect.Value, prefix string)
	check = func(v reflect.Value, prefix string) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			key := prefix + strings.Split(f.Tag.Get("yaml"), ",")[0]
			if key == "alerts" {
				continue
			}
			fv := v.Field(i)
			if inline(f) {
				check(fv, prefix)
				continue
			}
			if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
				check(fv, key+".")
				continue
			}
			row, ok := rows[key]
			if !ok || len(row) < 3 {
				continue // reported above
			}
			if err := sameDefault(fv, unquote(row[1])); err != nil {
				t.Errorf("docs/configuration.md `%s`: %v", key, err)
			}
		}
	}
	check(def, "")
}

// sameDefault compares a documented default ("none" or "" for a zero value) with v.
func sameDefault(v reflect.Value, doc string) error {
	zeroDoc := doc == "" || doc == "none" || doc == "—" || doc == "-"
	switch x := v.Interface().(type) {
	case time.Duration:
		if zeroDoc && x == 0 {
			return nil
		}
		d, err := time.ParseDuration(doc)
		if err != nil || d != x {
			return fmt.Errorf("documented default %q, real %s", doc, x)
		}
	case float64:
		f, err := strconv.ParseFloat(doc, 64)
		if (zeroDoc && x == 0) || (err == nil && f == x) {
			return nil
		}
		return fmt.Errorf("documented default %q, real %v", doc, x)
	case int:
		n, err := strconv.Atoi(doc)
		if (zeroDoc && x == 0) || (err == nil && n == x) {
			return nil
		}
		return fmt.Errorf("documented default %q, real %d", doc, x)
	case string:
		if (zeroDoc && x == "") || doc == x {
			return nil
		}
		return fmt.Errorf("documented default %q, real %q", doc, x)
	case bool:
		if (zeroDoc && !x) || doc == strconv.FormatBool(x) {
			return nil
		}
		return fmt.Errorf("documented default %q, real %v", doc, x)
	case []string:
		if zeroDoc && len(x) == 0 {
			return nil
		}
		return fmt.Errorf("documented default %q, real %q", doc, x)
	default:
		return fmt.Errorf("no default check for %T", x)
	}
	return nil
}

// helpFlags runs a subcommand with -help and returns its flags' defaults as printed, and
// checks that each flag's line names its environment twin.
func helpFlags(t *testing.T, run func(context.Context, []string) error) map[string]string {
	t.Helper()
	var runErr error
	out := captureStdout(t, func() { runErr = run(context.Background(), []string{"-help"}) })
	if !errors.Is(runErr, errHelp) {
		t.Fatalf("-help: %v", runErr)
	}
	flags := map[string]string{}
	name := ""
	nameLine := regexp.MustCompile(`^  --([a-z0-9-]+)( \w+)?\s+\$(\w+)$`)
	defaultRe := regexp.MustCompile(`\(default (.*)\)$`)
	for _, line := range strings.Split(out, "\n") {
		if m := nameLine.FindStringSubmatch(line); m != nil {
			name = m[1]
			if m[3] != envName(name) {
				t.Errorf("--%s: help names $%s, want $%s", name, m[3], envName(name))
			}
			// Help leaves out zero defaults.
			switch strings.TrimSpace(m[2]) {
			case "": // a bool flag
				flags[name] = "false"
			case "int", "uint", "float":
				flags[name] = "0"
			case "duration":
				flags[name] = "0s"
			default:
				flags[name] = ""
			}
			continue
		}
		if m := defaultRe.FindStringSubmatch(strings.TrimSpace(line)); m != nil && name != "" {
			d := m[1]
			if u, err := strconv.Unquote(d); err == nil {
				d = u
			}
			flags[name] = d
		}
	}
	if len(flags) < 10 {
		t.Fatalf("parsed only %d flags from:\n%s", len(flags), out)
	}
	return flags
}

// TestConfigurationDocumentsFlags: every flag of `watchdog sidecar` and `watchdog detector`
// has a row `--flag` in its section of docs/configuration.md naming its NCCLWATCH_*
// variable and its real default.
func TestConfigurationDocumentsFlags(t *testing.T) {
	sections := docTables(t)
	for _, cmd := range []struct {
		section string
		run     func(context.Context, []string) error
	}{{"Sidecar flags", runSidecar}, {"Detector flags", runDetector}} {
		rows := sections[cmd.section]
		if len(rows) == 0 {
			t.Errorf("docs/configuration.md has no section \"## %s\" with a table", cmd.section)
			continue
		}
		for f, def := range helpFlags(t, cmd.run) {
			key := "--" + f
			row, ok := rows[key]
			if !ok {
				t.Errorf("docs/configuration.md, %s: no row `%s`", cmd.section, key)
				continue
			}
			if len(row) < 4 {
				t.Errorf("`%s`: want | flag | variable | default | meaning |", key)
				continue
			}
			if got := unquote(row[1]); got != envName(f) {
				t.Errorf("`%s`: documented variable %q, real %q", key, got, envName(f))
			}
			doc := unquote(row[2])
			if doc != def && !(def == "" && (doc == "none" || doc == "")) && !(f == "job" && strings.Contains(doc, "SLURM_JOB_ID")) &&
				!(f == "node" && strings.Contains(doc, "hostname")) {
				t.Errorf("`%s`: documented default %q, real %q", key, doc, def)
			}
		}
	}
}

// TestExampleConfigs: the example detector configuration and the one the Helm chart
// renders decode strictly into DetectorConfig, with valid alert routing.
func TestExampleConfigs(t *testing.T) {
	decode := func(name string, b []byte) {
		cfg := defaultDetectorConfig()
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if cfg.Alerts != nil {
			if err := cfg.Alerts.Validate(); err != nil {
				t.Errorf("%s: alerts: %v", name, err)
			}
		}
	}
	b, err := os.ReadFile("../../deploy/examples/detector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	decode("deploy/examples/detector.yaml", b)

	// The ConfigMap of the rendered chart.
	m, err := os.ReadFile("../../deploy/kubernetes/ncclwatch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	dec := yaml.NewDecoder(bytes.NewReader(m))
	for {
		var o struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&o); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		if s, ok := o.Data["detector.yaml"]; ok && o.Kind == "ConfigMap" {
			found = true
			decode("deploy/kubernetes/ncclwatch.yaml detector.yaml", []byte(s))
		}
	}
	if !found {
		t.Error("no detector.yaml ConfigMap in deploy/kubernetes/ncclwatch.yaml")
	}
	if _, err := alert.LoadConfig("../../deploy/examples/alerts.yaml"); err != nil {
		t.Error(err)
	}
}
