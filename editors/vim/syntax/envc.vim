" Vim syntax file
" Language:    envc (the typed language of envc's `.env` files)
" Maintainer:  the envc project
" Notes:       Mirrors editors/envc.tmLanguage.json; editors/check_grammar.py tests both
"              against the same expectations. Plain legacy syntax commands only, so it
"              runs on Vim 8+ and Neovim 0.7 alike.

if exists('b:current_syntax')
  finish
endif
let s:cpo_save = &cpo
set cpo&vim

syn case match
" The lexer's identifiers are ASCII; without this `é` would join a keyword and hide it.
syn iskeyword a-z,A-Z,48-57,_
" `"""` strings and `${…}` may span many lines, and sources are small: sync from the start.
syn sync fromstart

" ---- errors (defined first: at one position the item defined last wins) -------------
" Characters that begin no token, grouped as the lexer groups them; `!` only in `!=`.
syn match envcError '[^[:space:]A-Za-z0-9_"#()[\]{},.:;=<>+\-*/%!]\+'
syn match envcError '!=\@!'

" ---- comments ------------------------------------------------------------------------
syn keyword envcTodo contained TODO FIXME XXX NOTE
syn match envcComment '#.*$' contains=envcTodo,@Spell

" ---- numbers -------------------------------------------------------------------------
" Like the lexer: digits, then letters glued to them are one token, valid only as a unit.
syn match envcNumberError '\<\d[0-9_]*[A-Za-z_]\w*'
syn match envcNumberError '\<0o\w*'
syn match envcInt '\<\d[0-9_]*\>'
syn match envcSize '\<\d[0-9_]*\%(KiB\|MiB\|GiB\|TiB\|KB\|MB\|GB\|TB\|B\)\>' contains=envcSizeUnit
syn match envcSizeUnit '\a\+' contained
syn match envcOctal '\<0o[0-7_]\+\>'

" ---- operators and punctuation -------------------------------------------------------
syn match envcOperator '\.\.=\=\|[=!<>]=\|=>\|[<>=+\-*/%]'
syn match envcAccessor '\.\.\@!'

" ---- strings -------------------------------------------------------------------------
syn match envcEscapeError '\\.' contained
syn match envcEscapeError '\\$' contained
syn match envcEscape '\\[ntr0\\"$]' contained
syn match envcEscapeNewline '\\$' contained
" A one-line string ends at its quote or, unterminated, at the line's end; a `${…}`
" inside it may still span lines (no keepend), as in the lexer.
syn region envcString matchgroup=envcQuote start='"' end='"\|$'
      \ contains=envcEscape,envcEscapeError,envcInterp
" Defined after the one-line string so that `"""` wins where both start.
syn region envcStringTriple matchgroup=envcQuote start='"""' end='"""'
      \ contains=envcEscape,envcEscapeNewline,envcEscapeError,envcInterp
" A quoted record key: `{ "x-y" = 1 }`.
syn match envcQuotedKey '"[^"\\$]*"\ze\s*=[=>]\@!' contains=envcQuotedKeyText
syn match envcQuotedKeyText '[^"]\+' contained

" Inside `${…}` the lexer is in code mode; envcBlock balances nested braces, so the
" first unmatched `}` closes the interpolation.
syn region envcInterp matchgroup=envcInterpDelim start='\${' end='}' contained contains=@envcCode

" ---- records, blocks, lists, calls ---------------------------------------------------
syn region envcBlock matchgroup=envcDelimiter start='{' end='}' contains=@envcCode
" `{for x in xs => k = v}`: the key before `=` is an expression, not a field name.
syn region envcRecordComp matchgroup=envcDelimiter start='{\ze\s*for\>' end='}'
      \ contains=@envcCodeNoKeys
syn region envcParen matchgroup=envcDelimiter start='(' end=')' contains=@envcCode
syn region envcBracket matchgroup=envcDelimiter start='\[' end='\]' contains=@envcCode

syn match envcFieldKey '\%(\.\s*\)\@<!\<\h\w*\ze\s*=[=>]\@!'
syn match envcMember '\%(\%(^\|[^.]\)\.\s*\)\@<=\h\w*\>\%(\s*(\)\@!'

" Calls: the name, then its arguments, where `name =` names an argument.
syn match envcFuncCall '\<\h\w*\ze\s*(' nextgroup=envcCallArgs skipwhite
syn match envcNodeCall '\%(\.\s*\)\@<!\<\%(vm\|host\|package\|file\|service\|manifest\|image\|exec\|gitops\|stack\|resource\)\ze\s*('
      \ nextgroup=envcCallArgs skipwhite
syn match envcCheckCall '\%(\.\s*\)\@<!\<\%(tcp\|http\|command\|installed\|os_release\|free_space\|empty_dir\)\ze\s*('
      \ nextgroup=envcCallArgs skipwhite
syn match envcBuiltinCall '\%(\.\s*\)\@<!\<\%(len\|keys\|values\|join\|split\|contains\|starts_with\|ends_with\|upper\|lower\|trim\|replace\|str\|sort\|merge\|path\|to_json\|secret\|all\|any\|min\|max\|read\|get\|nodes\)\ze\s*('
      \ nextgroup=envcCallArgs skipwhite
syn region envcCallArgs matchgroup=envcDelimiter start='(' end=')' contained
      \ contains=envcNamedArg,@envcCode
syn match envcNamedArg '\%(\.\s*\)\@<!\<\h\w*\ze\s*=[=>]\@!' contained

" ---- types ---------------------------------------------------------------------------
" In the parser `:` and `->` are always followed by a type.
syn match envcTypeColon ':' nextgroup=envcRecordType,envcBuiltinType,envcNodeType,envcTypeModule,envcTypeName skipwhite
syn match envcArrow '->' nextgroup=envcRecordType,envcBuiltinType,envcNodeType,envcTypeModule,envcTypeName skipwhite
syn keyword envcBuiltinType contained int str bool size mode path secret any target node check list dict
      \ nextgroup=envcTypeArgs,envcTypeRange skipwhite
syn keyword envcNodeType contained vm host package file service manifest image exec gitops stack resource
      \ nextgroup=envcTypeArgs,envcTypeRange skipwhite
syn match envcTypeName '\h\w*' contained nextgroup=envcTypeArgs,envcTypeRange skipwhite
" `module.Type`; after envcTypeName so that it wins where both match.
syn match envcTypeModule '\h\w*\ze\s*\.' contained nextgroup=envcTypeDot
syn match envcTypeDot '\s*\.\s*' contained nextgroup=envcTypeModule,envcTypeName
syn region envcTypeArgs matchgroup=envcDelimiter start='\[' end='\]' contained
      \ contains=envcRecordType,envcBuiltinType,envcNodeType,envcTypeModule,envcTypeName,envcComment
syn region envcTypeRange matchgroup=envcDelimiter start='(' end=')' contained contains=@envcCode
syn region envcRecordType matchgroup=envcDelimiter start='{' end='}' contained
      \ contains=envcFieldDecl,@envcCode
syn match envcFieldDecl '\<\h\w*\ze\s*:' contained

" ---- keywords and declarations -------------------------------------------------------
" Every keyword of TokenKind::keyword (lang/src/token.rs).
syn keyword envcConditional if else
syn keyword envcRepeat for in
syn keyword envcInclude import
syn keyword envcInclude as nextgroup=envcModuleAlias skipwhite
syn keyword envcAssert assert
syn keyword envcBoolean true false
syn keyword envcLogical and or not
syn keyword envcDecl let nextgroup=envcBindingName skipwhite
syn keyword envcDecl param nextgroup=envcParamName skipwhite
syn keyword envcDecl output nextgroup=envcOutputName skipwhite
syn keyword envcDecl policy moved rollout adopt
syn keyword envcTypedef type nextgroup=envcTypeDeclName skipwhite
syn keyword envcFn fn nextgroup=envcFuncName,envcParams skipwhite

syn match envcModuleAlias '\h\w*' contained
syn match envcBindingName '\h\w*' contained
syn match envcParamName '\h\w*' contained
syn match envcOutputName '\h\w*' contained
syn match envcTypeDeclName '\h\w*' contained nextgroup=envcTypeDeclEq skipwhite
syn match envcTypeDeclEq '=' contained
      \ nextgroup=envcRecordType,envcBuiltinType,envcNodeType,envcTypeModule,envcTypeName skipwhite skipnl
syn match envcFuncName '\h\w*' contained nextgroup=envcParams skipwhite
syn region envcParams matchgroup=envcDelimiter start='(' end=')' contained
      \ contains=envcParameter,@envcCode
" A name right after `(` or `,` (or first on its line) and before `:`, `=`, `,` or `)`.
syn match envcParameter '\%(\%(^\|[(,]\)\s*\)\@<=\<\h\w*\>\ze\s*\%([:,)]\|=[=>]\@!\)' contained

syn cluster envcCodeNoKeys contains=envcError,envcComment,envcNumberError,envcInt,envcSize,envcOctal,
      \envcOperator,envcAccessor,envcString,envcStringTriple,envcBlock,envcRecordComp,envcParen,
      \envcBracket,envcMember,envcFuncCall,envcNodeCall,envcCheckCall,envcBuiltinCall,
      \envcTypeColon,envcArrow,envcConditional,envcRepeat,envcInclude,envcAssert,envcBoolean,
      \envcLogical,envcDecl,envcTypedef,envcFn
syn cluster envcCode contains=@envcCodeNoKeys,envcFieldKey,envcQuotedKey

" ---- highlighting --------------------------------------------------------------------
hi def link envcError         Error
hi def link envcNumberError   Error
hi def link envcEscapeError   Error
hi def link envcTodo          Todo
hi def link envcComment       Comment
hi def link envcInt           Number
hi def link envcOctal         Number
hi def link envcSize          Number
hi def link envcSizeUnit      Number
hi def link envcOperator      Operator
hi def link envcArrow         Operator
hi def link envcLogical       Operator
hi def link envcString        String
hi def link envcStringTriple  String
hi def link envcQuote         String
hi def link envcQuotedKey     String
hi def link envcQuotedKeyText Identifier
hi def link envcEscape        SpecialChar
hi def link envcEscapeNewline SpecialChar
hi def link envcInterpDelim   Delimiter
hi def link envcDelimiter     Delimiter
hi def link envcFieldKey      Identifier
hi def link envcFieldDecl     Identifier
hi def link envcMember        Identifier
hi def link envcNamedArg      Identifier
hi def link envcParameter     Identifier
hi def link envcFuncCall      Function
hi def link envcBuiltinCall   Function
hi def link envcCheckCall     Function
hi def link envcNodeCall      Structure
hi def link envcBuiltinType   Type
hi def link envcNodeType      Structure
hi def link envcTypeName      Type
hi def link envcTypeModule    Identifier
hi def link envcTypeDeclName  Type
hi def link envcConditional   Conditional
hi def link envcRepeat        Repeat
hi def link envcInclude       Include
hi def link envcAssert        Keyword
hi def link envcBoolean       Boolean
hi def link envcDecl          Keyword
hi def link envcTypedef       Typedef
hi def link envcFn            Keyword
hi def link envcModuleAlias   Identifier
hi def link envcBindingName   Identifier
hi def link envcParamName     Identifier
hi def link envcOutputName    Identifier
hi def link envcFuncName      Function

let b:current_syntax = 'envc'
let &cpo = s:cpo_save
unlet s:cpo_save
