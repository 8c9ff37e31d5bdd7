#!/usr/bin/env python3
"""The layer check: every #include in the tree against the manifest (layers.txt).

    check_layers.py SOURCE_ROOT BUILD_ROOT            the whole tree; prints each
                                                      include outside the manifest
    check_layers.py SOURCE_ROOT BUILD_ROOT --as PATH FILE
                                                      FILE's includes as if it lay at PATH

The installed headers are what meson installs (BUILD_ROOT/meson-info/
intro-installed.json), so a header is public exactly when the build ships it.
Exits 1 when an include breaks a rule, 0 otherwise.
"""
import json
import os
import re
import sys

SOURCE_SUFFIXES = ('.c', '.h', '.cu', '.cuh', '.inc', '.def')
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
UMBRELLA = 'umbrella'  # the files at the root (mixgrad.h)


class Manifest:
    """The rooms, what each may include, and the library-internal tier."""

    def __init__(self, path):
        self.kinds = {}     # room -> 'library', 'program' or 'whitebox'
        self.allowed = {}   # room -> rooms whose headers it may include
        self.internal = {}  # header path -> rooms that may include it
        self.pending = []   # folders not checked until the move named beside them lands
        with open(path, encoding='utf-8') as f:
            for number, line in enumerate(f, 1):
                line = line.split('#', 1)[0].strip()
                if not line:
                    continue
                head, _, tail = line.partition(':')
                words = head.split()
                if len(words) != 2 or words[0] not in ('library', 'program', 'whitebox', 'internal', 'pending'):
                    sys.exit(f'{path}:{number}: expected "library|program|whitebox|internal|pending NAME: ...", '
                             f'got {line!r}')
                kind, name = words
                if kind == 'pending':
                    self.pending.append(name.rstrip('/') + '/')
                elif kind == 'internal':
                    self.internal[name] = set(tail.split())
                else:
                    self.kinds[name] = kind
                    self.allowed[name] = set(tail.split())
        for name, rooms in list(self.allowed.items()) + list(self.internal.items()):
            for room in rooms - set(self.kinds):
                sys.exit(f'{path}: {name} names {room}, which is no room of the manifest')


def room_of(rel):
    return rel.split('/', 1)[0] if '/' in rel else UMBRELLA


def resolve(root, includer_rel, quote, name, headers_by_name):
    """The header's path relative to root, or None when it is not in the tree.
    Quoted includes are looked up beside the includer, then from the root (the
    build's -I); a white-box program's bare name may also come from one other
    folder of the tree (a test target's include_directories)."""
    candidates = [name] if quote == '<' else [os.path.join(os.path.dirname(includer_rel), name), name]
    for rel in candidates:
        rel = os.path.normpath(rel)
        if not rel.startswith('..') and os.path.isfile(os.path.join(root, rel)):
            return rel
    if quote == '"' and '/' not in name and len(headers_by_name.get(name, ())) == 1:
        return headers_by_name[name][0]
    return None


def check_file(root, manifest, installed, headers_by_name, rel, text):
    """The broken rules of one file (rel: its path from root), as messages."""
    errors = []
    if any(rel.startswith(folder) for folder in manifest.pending):
        return errors
    room = room_of(rel)
    kind = manifest.kinds.get(room)
    if kind is None:
        return [f'{rel}: the folder {room}/ holds C sources but is no room of layers.txt']
    for number, line in enumerate(text.splitlines(), 1):
        match = INCLUDE.match(line)
        if not match:
            continue
        quote, name = match.groups()
        where = f'{rel}:{number}: "{name}"'
        target = resolve(root, rel, quote, name, headers_by_name)
        if target is None:
            if quote == '"' and name not in manifest.internal:
                errors.append(f'{where} is no file of the tree')
            elif quote == '"' and room not in manifest.internal[name] and kind != 'whitebox':
                errors.append(f'{where} (generated) is not for {room}; layers.txt lets '
                              f'{", ".join(sorted(manifest.internal[name]))} include it')
            continue
        if rel in installed and target not in installed:
            errors.append(f'{where}: an installed header includes {target}, which is not installed')
            continue
        target_room = room_of(target)
        if target_room == room or kind == 'whitebox':
            continue
        if target in manifest.internal:
            if room not in manifest.internal[target]:
                errors.append(f'{where} is library-internal; layers.txt lets '
                              f'{", ".join(sorted(manifest.internal[target]))} include it, not {room}')
            continue
        if target_room not in manifest.allowed[room]:
            errors.append(f'{where}: {room} may not include {target_room} '
                          f'(layers.txt: {room} -> {" ".join(sorted(manifest.allowed[room])) or "nothing"})')
        elif manifest.kinds.get(target_room) == 'library' and target not in installed:
            errors.append(f'{where} is not installed by {target_room}/; {room} may include only '
                          f'its installed headers')
    return errors


def tree_files(root, manifest):
    """Every C source of the tree, relative to root: each room's folder, and
    any other top-level folder holding C sources (so no new room escapes)."""
    found = []
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith('.') or entry.startswith('build'):
            continue
        if os.path.isfile(path):
            if entry.endswith(SOURCE_SUFFIXES):
                found.append(entry)
            continue
        if os.path.exists(os.path.join(path, 'meson-private')):
            continue  # a build folder under another name
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
            found += [os.path.relpath(os.path.join(folder, f), root) for f in sorted(files)
                      if f.endswith(SOURCE_SUFFIXES)]
    return found


def main(argv):
    if 'vgpreload' in os.environ.get('LD_PRELOAD', ''):
        print('skipped under valgrind: this checks sources and binaries, not memory')
        return 77
    if len(argv) not in (3, 6) or (len(argv) == 6 and argv[3] != '--as'):
        sys.exit(__doc__)
    root, build_root = os.path.realpath(argv[1]), argv[2]
    manifest = Manifest(os.path.join(root, 'layers.txt'))
    with open(os.path.join(build_root, 'meson-info', 'intro-installed.json'), encoding='utf-8') as f:
        installed = {os.path.relpath(os.path.realpath(src), root) for src in json.load(f)}
    files = tree_files(root, manifest)
    headers_by_name = {}
    for rel in files:
        headers_by_name.setdefault(os.path.basename(rel), []).append(rel)
    if len(argv) == 6:
        with open(argv[5], encoding='utf-8') as f:
            errors = check_file(root, manifest, installed, headers_by_name, argv[4], f.read())
    else:
        errors = []
        for rel in files:
            with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
                errors += check_file(root, manifest, installed, headers_by_name, rel, f.read())
    for error in errors:
        print(error)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
