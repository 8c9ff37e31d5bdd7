#!/usr/bin/env python3
"""libmixgrad.so's exported symbols and ABI against the committed baseline.

    abi.py symbols SOURCE_ROOT BUILD_ROOT   what `nm -D --defined-only` lists must be
                                            share/abi/libmixgrad.symbols, each one declared
                                            in an installed header; every installed header
                                            that declares functions exports them
                                            (MX_API_BEGIN); the CUDA module, when built,
                                            needs nothing of libmixgrad.so
    abi.py compat SOURCE_ROOT BUILD_ROOT    abidiff of share/abi/libmixgrad.abi against the
                                            library: fails on an incompatible change
    abi.py update SOURCE_ROOT BUILD_ROOT    rewrites both files (scripts/update-abi)

The insides of the opaque types (declared in an installed header, defined
elsewhere: mx_tensor, mx_module, ...) and of internal ones (mx__*) may change:
abidiff is told to ignore them. (abidw's --drop-private-types would do it, but
libabigail 2.2 then merges every anonymous struct typedef into one.)
"""
import json
import os
import re
import subprocess
import sys

SKIP = 77  # meson's code for a skipped test


def installed_headers(source_root, build_root):
    with open(os.path.join(build_root, 'meson-info', 'intro-installed.json'), encoding='utf-8') as f:
        return sorted(src for src in json.load(f) if src.endswith('.h') and src.startswith(source_root + os.sep))


def exported(library):
    """The names the library exports, less the reserved ones (a leading
    underscore) that sanitizers and the toolchain add."""
    out = subprocess.run(['nm', '-D', '--defined-only', library], check=True, capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return sorted(name for name in names if not name.startswith('_'))


def strip_comments(text):
    return re.sub(r'/\*.*?\*/|//[^\n]*', '', text, flags=re.S)


def check_symbols(source_root, build_root, symbols_file, library):
    errors = []
    with open(symbols_file, encoding='utf-8') as f:
        committed = [line.strip() for line in f if line.strip() and not line.startswith('#')]
    now = exported(library)
    for name in sorted(set(committed) - set(now)):
        errors.append(f'{name}: in share/abi/libmixgrad.symbols but no longer exported (an ABI break, '
                      f'or run scripts/update-abi if it is meant)')
    for name in sorted(set(now) - set(committed)):
        errors.append(f'{name}: exported but not in share/abi/libmixgrad.symbols (run scripts/update-abi)')
    headers = {path: strip_comments(open(path, encoding='utf-8').read())
               for path in installed_headers(source_root, build_root)}
    public_text = '\n'.join(headers.values())
    for name in now:
        if not re.search(r'\b%s\b' % re.escape(name), public_text):
            errors.append(f'{name}: exported, but no installed header declares it')
    declaration = re.compile(r'^(?!\s*(static|typedef|#|return))[A-Za-z_][\w \t\*]*\bmx_\w+\s*\([^;{}]*\)[^;{}]*;',
                             re.M)
    for path, text in headers.items():
        if declaration.search(text) and 'MX_API_BEGIN' not in text:
            errors.append(f'{os.path.relpath(path, source_root)}: declares functions outside MX_API_BEGIN/'
                          f'MX_API_END (kernels/api.h), so libmixgrad.so would not export them')
    module = os.path.join(build_root, 'libmixgrad_cuda.so')
    if os.path.exists(module):
        out = subprocess.run(['nm', '-D', '--undefined-only', module], check=True, capture_output=True,
                             text=True).stdout
        for name in sorted({line.split()[-1] for line in out.splitlines() if line.strip()}):
            if name.startswith('mx_'):
                errors.append(f'libmixgrad_cuda.so needs {name} from outside: the module calls the library '
                              f'only through its table (kernels/cuda/cuda_backend.h)')
    return errors


def private_types_suppression(source_root, build_root, path):
    """Writes an abidiff suppression file for the types users cannot see into."""
    text = '\n'.join(strip_comments(open(header, encoding='utf-8').read())
                     for header in installed_headers(source_root, build_root))
    opaque = sorted(name for name in set(re.findall(r'typedef struct (\w+) \1;', text))
                    if not re.search(r'struct %s\s*\{' % name, text))
    with open(path, 'w', encoding='utf-8') as f:
        f.write('[suppress_type]\n  name_regexp = ^(mx__.*|%s)$\n' % '|'.join(opaque))


def has_debug_info(library):
    out = subprocess.run(['readelf', '-S', library], check=True, capture_output=True, text=True).stdout
    return '.debug_info' in out


def main(argv):
    if 'vgpreload' in os.environ.get('LD_PRELOAD', ''):
        print('skipped under valgrind: this checks sources and binaries, not memory')
        return SKIP
    if len(argv) != 4 or argv[1] not in ('symbols', 'compat', 'update'):
        sys.exit(__doc__)
    command, source_root, build_root = argv[1], os.path.realpath(argv[2]), os.path.realpath(argv[3])
    abi_dir = os.path.join(source_root, 'share', 'abi')
    symbols_file = os.path.join(abi_dir, 'libmixgrad.symbols')
    abi_file = os.path.join(abi_dir, 'libmixgrad.abi')
    library = os.path.join(build_root, 'libmixgrad.so')
    if not os.path.exists(library):
        print(f'{library} is not built (default_library=static): nothing to check')
        return SKIP
    if command == 'symbols':
        errors = check_symbols(source_root, build_root, symbols_file, library)
        for error in errors:
            print(error)
        return 1 if errors else 0
    if not has_debug_info(library):
        print(f'{library} has no debug information (-g), which abidw and abidiff read')
        return SKIP if command == 'compat' else 1
    if command == 'update':
        with open(symbols_file, 'w', encoding='utf-8') as f:
            f.write('# The symbols libmixgrad.so exports (nm -D --defined-only): its public API.\n'
                    '# Written by scripts/update-abi; checked by meson test --suite layers.\n')
            f.writelines(name + '\n' for name in exported(library))
        subprocess.run(['abidw', '--no-corpus-path', '--no-comp-dir-path', '--no-show-locs', '--type-id-style', 'hash',
                        '--exported-interfaces-only', '--out-file', abi_file, library], check=True)
        print(f'wrote {os.path.relpath(symbols_file, source_root)} and {os.path.relpath(abi_file, source_root)}')
        return 0
    suppression = os.path.join(build_root, 'meson-private', 'mixgrad-private-types.suppr')
    private_types_suppression(source_root, build_root, suppression)
    run = subprocess.run(['abidiff', '--exported-interfaces-only', '--suppressions', suppression, abi_file, library],
                         capture_output=True, text=True)
    print(run.stdout + run.stderr)
    # abidiff's status is a bit mask: 1 error, 2 usage, 4 a change, 8 an incompatible change.
    # Additions (4 alone) are compatible; the symbols test asks for the list to be rewritten.
    if run.returncode & (1 | 2 | 8):
        print('an incompatible ABI change (above) against share/abi/libmixgrad.abi: if it is meant, '
              'run scripts/update-abi and say so in the commit')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
