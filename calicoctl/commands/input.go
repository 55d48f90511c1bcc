package commands

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// fileOptions are the flags of commands that read resources from files.
type fileOptions struct {
	filename  string
	recursive bool
	skipEmpty bool
}

func (f *fileOptions) register(cmd *cobra.Command, verb string) {
	cmd.Flags().StringVarP(&f.filename, "filename", "f", "",
		"Filename to use to "+verb+" the resource. If set to \"-\" loads from stdin. If filename is a directory, "+
			"every .json, .yaml and .yml file in it is read, in name order.")
	cmd.Flags().BoolVarP(&f.recursive, "recursive", "R", false, "Process the directory given with -f recursively.")
	cmd.Flags().BoolVar(&f.skipEmpty, "skip-empty", false, "Do not error if the files given with -f contain no data.")
}

// load reads and decodes every resource the -f option names. Nothing is
// returned unless every file decodes.
func (f *fileOptions) load(stdin io.Reader) ([]v3.Resource, error) {
	if f.filename == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return f.decode("stdin", data)
	}
	st, err := os.Stat(f.filename)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		data, err := os.ReadFile(f.filename)
		if err != nil {
			return nil, err
		}
		return f.decode(f.filename, data)
	}
	files, err := f.dirFiles()
	if err != nil {
		return nil, err
	}
	var all []v3.Resource
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		rs, err := f.decode(name, data)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	if len(all) == 0 && !f.skipEmpty {
		return nil, fmt.Errorf("No resources specified in directory %s", f.filename)
	}
	return all, nil
}

// dirFiles lists the resource files of the -f directory in name order.
func (f *fileOptions) dirFiles() ([]string, error) {
	var files []string
	err := filepath.WalkDir(f.filename, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != f.filename && !f.recursive {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			files = append(files, path)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// decode turns one file's bytes into resources, naming the file in errors.
func (f *fileOptions) decode(name string, data []byte) ([]v3.Resource, error) {
	rs, err := v3.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, r := range rs {
		if !isStored(r) {
			return nil, fmt.Errorf("%s: kind %s cannot be stored in the datastore", name, r.GetTypeMeta().Kind)
		}
	}
	if len(rs) == 0 && !f.skipEmpty {
		return nil, fmt.Errorf("No resources specified in file %s", name)
	}
	return rs, nil
}

// isStored says whether r is of a kind the datastore keeps.
func isStored(r v3.Resource) bool {
	info, ok := v3.KindByName(r.GetTypeMeta().Kind)
	return ok && info.Stored
}
