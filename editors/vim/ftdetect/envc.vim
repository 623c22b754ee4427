" Filetype detection for envc sources (Vim 8+, Neovim 0.7+).
"
" envc sources are named NAME.env (the environment's name is the stem), a suffix that
" dotenv files share (docker compose's env_file, `app.env`), and Vim's own filetype.vim
" makes every *.env a shell script. The name cannot decide, so the content does:
"
"   1. The first line that is neither blank nor a `#` comment decides. envc if it opens
"      an item: `let|param|output|type|fn NAME`, `import "…"` or `assert EXPR`. A dotenv
"      line is `KEY=value` or `export KEY=value`: no keyword is followed by a space and
"      then a name or a quote, so `type = x`, `let=1` or `export FOO=1` never match.
"   2. A file with no such line yet (new, empty, comments only) is envc when the project
"      says so: its lockfile NAME.lock beside it (`envc lock` writes it there), an
"      `envc.toml` in its directory or above, or the `.envc/` store beside it.
"   3. Otherwise Vim's choice stands.
"
" `.env` itself (no stem, so no environment name) is always left to dotenv/sh.
" A modeline (`# vim: ft=envc`) still overrides all of this.

function! s:EnvcDetect() abort
  let l:name = expand('<afile>:t')
  if l:name ==# '.env'
    return
  endif
  let l:verdict = s:EnvcFromContent()
  if l:verdict ==# 'envc' || (l:verdict ==# '' && s:EnvcProjectMarker(expand('<afile>:p')))
    " `set`, not `setfiletype`: filetype.vim already made it `sh`.
    set filetype=envc
  endif
endfunction

" 'envc', 'other', or '' when no line decides (checked within the first 200 lines).
function! s:EnvcFromContent() abort
  let l:last = min([line('$'), 200])
  let l:n = 1
  while l:n <= l:last
    let l:line = getline(l:n)
    let l:n += 1
    if l:line =~# '^\s*\%(#.*\)\=$'
      continue
    endif
    if l:line =~# '^\s*\%(\%(let\|param\|output\|type\|fn\)\s\+\h\|import\s\+"\|assert\s\+[^=[:space:]]\)'
      return 'envc'
    endif
    return 'other'
  endwhile
  return ''
endfunction

function! s:EnvcProjectMarker(path) abort
  let l:dir = fnamemodify(a:path, ':h')
  let l:stem = fnamemodify(a:path, ':t:r')
  return filereadable(l:dir . '/' . l:stem . '.lock')
        \ || isdirectory(l:dir . '/.envc')
        \ || !empty(findfile('envc.toml', escape(l:dir, ' ,') . ';'))
endfunction

autocmd BufNewFile,BufRead *.env call s:EnvcDetect()
