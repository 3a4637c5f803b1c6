#!/usr/bin/env python3
"""Builds the Swift API's DocC documentation (Sources/MTLS/MTLS.docc) from a debug build.

The API is the umbrella module `MTLS`, which re-exports one target per layer. Users see one
module, so the layers' symbol graphs (extracted from the built modules with the toolchain's
swift-symbolgraph-extract, public symbols only) are given to DocC as module `MTLS`; then
`docc convert --warnings-as-errors` builds the archive (a broken ``link`` in a doc comment or an
article fails). No rebuild: the modules of `swift build -c debug` are read as they are.

  scripts/build-docc.py BUILD_DIR OUT_DIR     (BUILD_DIR: `swift build -c debug --show-bin-path`)
"""
import glob
import json
import os
import shutil
import subprocess
import sys

LAYERS = ['MTLSBase', 'MTLSNet', 'MTLSX509', 'MTLSStore', 'MTLSTrust', 'MTLSSources', 'MTLSTLS',
          'MTLSEnrollment', 'MTLSLifecycle', 'MTLS']


def tool(name):
    found = shutil.which(name)
    if not found:
        swift = shutil.which('swift')
        candidate = os.path.join(os.path.dirname(os.path.realpath(swift)), name) if swift else ''
        found = candidate if os.path.exists(candidate) else None
    if not found:
        sys.exit(f'build-docc: {name} not found (it comes with the Swift toolchain)')
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build, out = sys.argv[1], sys.argv[2]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    raw = os.path.join(out, 'symbols-raw')
    merged = os.path.join(out, 'symbols')
    for d in (raw, merged):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    triple = subprocess.run(['swift', '-print-target-info'], capture_output=True, text=True, check=True)
    target = json.loads(triple.stdout)['target']['triple']
    includes = []
    for d in ['COpenSSL', 'CP11Kit', 'CSQLite', 'CMTLSHeader', 'CMTLSProvider/include']:
        includes += ['-I', os.path.join(root, 'Sources', d)]
    p11 = subprocess.run(['pkg-config', '--cflags-only-I', 'p11-kit-1'], capture_output=True, text=True)
    for flag in p11.stdout.split():
        includes += ['-I', flag[2:]]
    provider_map = os.path.join(build, 'CMTLSProvider.build', 'module.modulemap')
    for module in LAYERS:
        subprocess.run([tool('swift-symbolgraph-extract'), '-module-name', module, '-target', target,
                        '-I', os.path.join(build, 'Modules'), *includes, '-Xcc', f'-fmodule-map-file={provider_map}',
                        '-minimum-access-level', 'public', '-output-dir', raw], check=True)
    # One module for the reader: every layer's symbols (and their extensions of each other's
    # types) become module MTLS's; relationships across layers then resolve inside it.
    for i, path in enumerate(sorted(glob.glob(os.path.join(raw, '*.symbols.json')))):
        graph = json.load(open(path))
        graph['module']['name'] = 'MTLS'
        json.dump(graph, open(os.path.join(merged, f'MTLS-{i:02d}.symbols.json'), 'w'))
    archive = os.path.join(out, 'MTLS.doccarchive')
    shutil.rmtree(archive, ignore_errors=True)
    subprocess.run([tool('docc'), 'convert', os.path.join(root, 'Sources', 'MTLS', 'MTLS.docc'),
                    '--additional-symbol-graph-dir', merged, '--fallback-display-name', 'MTLS',
                    '--fallback-bundle-identifier', 'org.libmtls.MTLS', '--output-path', archive,
                    '--warnings-as-errors'], check=True)
    print(f'build-docc: {archive}')


if __name__ == '__main__':
    main()
