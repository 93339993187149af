from kindex_etl.cli import main

raise SystemExit(main())
